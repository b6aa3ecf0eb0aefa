"""The admin's channel list: status with its reason, mode, last update, scoped to the
instances the user administers, and the "test connection" action."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from instances.models import ChannelConfig
from messaging.models import ChannelState
from tests.factories import UserFactory
from tests.messaging.conftest import TELEGRAM_TOKEN
from tests.messaging.platform import PlatformServer

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_list_shows_each_channels_state_to_its_instances_admins_only(
    client: Any, owner: Any, telegram_channel: ChannelConfig, other_instance: Any
) -> None:
    ChannelState.objects.create(
        config=telegram_channel, status="error", reason="Telegram: Unauthorized", mode="webhook",
        last_update_at=timezone.now(),
    )  # fmt: skip
    other = ChannelConfig.objects.create(instance=other_instance, kind="slack")
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    page = client.get(reverse("admin:instances_channelconfig_changelist"))
    outsider = UserFactory(is_staff=True)
    client.force_login(outsider)
    refused = client.get(reverse("admin:instances_channelconfig_changelist"))

    assert page.status_code == 200
    assert list(page.context["cl"].result_list) == [telegram_channel]
    assert "error: Telegram: Unauthorized" in page.content.decode()
    assert other.pk not in [c.pk for c in page.context["cl"].result_list]
    assert refused.status_code == 403


def _row(page: Any, config: ChannelConfig) -> dict[str, str]:
    """The change list's cells of ``config``'s row, by column."""
    admin_view = page.context["cl"].model_admin
    return {
        column: str(getattr(admin_view, column)(config))
        for column in ("status", "mode", "last_update")
    }


def test_the_list_shows_running_stopped_and_error_with_mode_and_last_update(
    client: Any, owner: Any, instance: Any, telegram_channel: ChannelConfig,
    slack_channel: ChannelConfig,
) -> None:  # fmt: skip
    received = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    ChannelState.objects.create(
        config=telegram_channel, status="running", mode="polling", last_update_at=received
    )
    ChannelState.objects.create(
        config=slack_channel, status="error", reason="Slack: invalid_auth", mode="events"
    )
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    running = client.get(reverse("admin:instances_channelconfig_changelist"))
    ChannelState.objects.filter(config=telegram_channel).update(
        status="stopped", reason="disabled or changed"
    )
    stopped = client.get(reverse("admin:instances_channelconfig_changelist"))

    assert _row(running, telegram_channel) == {
        "status": "running", "mode": "polling", "last_update": "2026-03-04 05:06:07 UTC",
    }  # fmt: skip
    assert _row(running, slack_channel) == {
        "status": "error: Slack: invalid_auth", "mode": "events", "last_update": "never",
    }  # fmt: skip
    html = running.content.decode()
    assert "2026-03-04 05:06:07 UTC" in html
    assert "error: Slack: invalid_auth" in html
    telegram_channel.refresh_from_db()
    assert _row(stopped, telegram_channel)["status"] == "stopped: disabled or changed"
    assert "stopped: disabled or changed" in stopped.content.decode()


def test_test_connection_reports_the_bot(
    client: Any, owner: Any, telegram_channel: ChannelConfig, platform: PlatformServer
) -> None:
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    page = client.post(
        reverse("admin:instances_channelconfig_changelist"),
        {"action": "test_connection", "_selected_action": [telegram_channel.pk]},
        follow=True,
    )

    assert page.status_code == 200
    assert [str(m) for m in page.context["messages"]] == ["demo: telegram: @mate_bot"]
    assert [c.method for c in platform.calls] == ["getMe", "getMe"]
    assert {c.token for c in platform.calls} == {TELEGRAM_TOKEN}


def test_test_connection_reports_a_refused_token_as_an_error(
    client: Any, owner: Any, telegram_channel: ChannelConfig, slack_channel: ChannelConfig,
    platform: PlatformServer,
) -> None:  # fmt: skip
    platform.refused_tokens.add(TELEGRAM_TOKEN)
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    page = client.post(
        reverse("admin:instances_channelconfig_changelist"),
        {"action": "test_connection", "_selected_action": [telegram_channel.pk, slack_channel.pk]},
        follow=True,
    )

    outcomes = {(m.level_tag, str(m)) for m in page.context["messages"]}
    assert outcomes == {
        (
            "error",
            "demo: telegram: AdapterError: Telegram: The token `[credential]` was "
            "rejected by the server.",
        ),
        ("success", "demo: slack: mate in Team"),
    }
    assert TELEGRAM_TOKEN not in page.content.decode()
    # Testing starts nothing: no webhook set, no state recorded.
    assert platform.of("setWebhook") == []
    assert not ChannelState.objects.exists()


def test_the_list_shows_each_channels_id_and_the_url_its_platform_posts_to(
    client: Any, owner: Any, telegram_channel: ChannelConfig, slack_channel: ChannelConfig,
    settings: Any,
) -> None:  # fmt: skip
    settings.MESSAGING_PUBLIC_URL = "https://mates.example"
    owner.is_staff = True
    owner.save()
    client.force_login(owner)

    page = client.get(reverse("admin:instances_channelconfig_changelist"))
    model_admin = page.context["cl"].model_admin
    shown = (model_admin.endpoint(slack_channel), model_admin.endpoint(telegram_channel))
    settings.MESSAGING_PUBLIC_URL = ""
    unset = client.get(reverse("admin:instances_channelconfig_changelist"))

    slack_url = f"https://mates.example/channels/slack/{slack_channel.pk}/"
    telegram_url = f"https://mates.example/channels/telegram/{telegram_channel.pk}/"
    assert shown == (slack_url, telegram_url)
    html = page.content.decode()
    assert slack_url in html
    assert telegram_url in html
    assert f">{slack_channel.pk}<" in html
    unset_admin = unset.context["cl"].model_admin
    assert unset_admin.endpoint(slack_channel) == (
        f"https://<this server>/channels/slack/{slack_channel.pk}/"
    )
    assert unset_admin.endpoint(telegram_channel) == (
        "none: long-polled (MESSAGING_PUBLIC_URL is not set)"
    )
    assert "none: long-polled" in unset.content.decode()
