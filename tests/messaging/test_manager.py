"""The channel manager: failures kept to their channel, changes taken without a restart,
channels without credentials skipped, the admin's state and connection test; Telegram's
long polling; bursts merged and messages queued behind a running turn."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.db.utils import ProgrammingError
from django.test import AsyncClient
from psycopg.errors import UndefinedTable
from slack_sdk.signature import SignatureVerifier

from instances.models import ChannelConfig
from instances.services import channel_config_set
from messaging import bursts
from messaging.adapters.telegram import SECRET_HEADER, TelegramAdapter, webhook_secret
from messaging.manager import ChannelManager, connection_test, default_factories
from messaging.models import ChannelState
from tests.messaging.conftest import (
    SLACK_SECRET,
    TELEGRAM_TOKEN,
    LeadGate,
    SendGate,
    script_turn,
    wait_calls,
)
from tests.messaging.platform import PlatformServer

pytestmark = pytest.mark.django_db(transaction=True)


class BrokenTelegram(TelegramAdapter):
    """An adapter whose start raises something unexpected."""

    async def start(self) -> None:
        raise RuntimeError("boom at start")


def _update(update_id: int, text: str, user_id: int = 7) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000, "text": text,
        "chat": {"id": user_id, "type": "private"},
        "from": {"id": user_id, "is_bot": False, "first_name": "Ann"}}}  # fmt: skip


async def _post(config: ChannelConfig, payload: Any) -> Any:
    return await AsyncClient().post(
        f"/channels/telegram/{config.pk}/",
        data=json.dumps(payload),
        content_type="application/json",
        headers={SECRET_HEADER: webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=config.pk)},
    )


async def test_one_adapter_failing_to_start_leaves_the_other_running(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    manager.factories["telegram"] = BrokenTelegram
    script_turn(llm_script, "Slack still answers.")

    await manager.reconcile()
    body = json.dumps({"type": "event_callback", "team_id": "T1", "event_id": "EvBroken",
                       "event": {"type": "app_mention", "user": "U1", "text": "still there?",
                                 "channel": "C1", "ts": "5.5"}})  # fmt: skip
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(SLACK_SECRET).generate_signature(timestamp=timestamp, body=body)
    answered = await AsyncClient().post(
        f"/channels/slack/{slack_channel.pk}/", data=body, content_type="application/json",
        headers={"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature or ""},
    )  # fmt: skip
    refused = await _post(telegram_channel, _update(1, "hello?"))
    await manager.adapters[slack_channel.pk].desk.idle()

    assert list(manager.adapters) == [slack_channel.pk]
    states = {s.config_id: (s.status, s.reason) async for s in ChannelState.objects.all()}
    assert states == {
        telegram_channel.pk: ("error", "RuntimeError: boom at start"),
        slack_channel.pk: ("running", ""),
    }
    config = await ChannelConfig.objects.aget(pk=telegram_channel.pk)
    assert config.last_error == "RuntimeError: boom at start"
    assert (answered.status_code, refused.status_code) == (200, 404)
    assert [(c.params["thread_ts"], c.params["text"]) for c in platform.of("chat.postMessage")] == [
        ("5.5", "Slack still answers.")
    ]


async def test_refused_credentials_are_an_error_with_the_platforms_reason(
    platform: PlatformServer,
    telegram_channel: ChannelConfig,
    slack_channel: ChannelConfig,
) -> None:
    platform.refused_tokens.add(TELEGRAM_TOKEN)
    manager = ChannelManager()

    await manager.reconcile()

    assert list(manager.adapters) == [slack_channel.pk]
    state = await ChannelState.objects.aget(config_id=telegram_channel.pk)
    # The platform's reason, without the token python-telegram-bot quotes in it.
    refused = "AdapterError: Telegram: The token `[credential]` was rejected by the server."
    assert (state.status, state.reason) == ("error", refused)
    config = await ChannelConfig.objects.aget(pk=telegram_channel.pk)
    assert config.last_error == refused
    assert await connection_test(config_id=slack_channel.pk) == (True, "mate in Team")
    assert await connection_test(config_id=telegram_channel.pk) == (False, refused)
    await manager.stop_all()


async def _until(predicate: Any, what: str) -> None:
    """Wait until ``predicate()`` (or its awaited result) holds (the manager's loop
    reconciles every 0.05 s)."""
    for _ in range(250):
        held = predicate()
        if asyncio.iscoroutine(held):
            held = await held
        if held:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never: {what}")


async def _status_is(config_id: int, status: str) -> bool:
    return await ChannelState.objects.filter(config_id=config_id, status=status).aexists()


async def test_a_config_change_starts_and_stops_an_adapter_without_a_restart(
    platform: PlatformServer, manager: ChannelManager, instance: Any, settings: Any
) -> None:
    settings.MESSAGING_RECONCILE_S = 0.05
    stopping = asyncio.Event()
    running = asyncio.create_task(manager.run(stopping))
    config = await sync_to_async(channel_config_set)(
        instance=instance, kind="telegram", credentials={"bot_token": TELEGRAM_TOKEN},
        enabled=True,
    )  # fmt: skip
    await _until(lambda: config.pk in manager.adapters, "started")
    first = manager.adapters[config.pk]
    # New credentials: the adapter is replaced by one with the new token.
    await sync_to_async(channel_config_set)(
        instance=instance, kind="telegram", credentials={"bot_token": "999:new-token"}
    )
    await _until(lambda: manager.adapters.get(config.pk) not in (None, first), "restarted")
    restarted_token = manager.adapters[config.pk].credentials["bot_token"]
    await sync_to_async(channel_config_set)(instance=instance, kind="telegram", enabled=False)
    await _until(lambda: config.pk not in manager.adapters, "stopped")
    await _until(lambda: _status_is(config.pk, "stopped"), "recorded as stopped")
    after_disable = await _post(config, _update(1, "hello?"))
    stopped_state = await ChannelState.objects.aget(config_id=config.pk)
    await sync_to_async(channel_config_set)(instance=instance, kind="telegram", enabled=True)
    await _until(lambda: config.pk in manager.adapters, "started again")
    await _until(lambda: _status_is(config.pk, "running"), "recorded as running")
    stopping.set()
    await running

    assert restarted_token == "999:new-token"
    assert after_disable.status_code == 404
    assert (stopped_state.status, stopped_state.reason) == ("stopped", "disabled or changed")
    assert [c.token for c in platform.of("setWebhook")] == [
        TELEGRAM_TOKEN,
        "999:new-token",
        "999:new-token",
    ]
    # Only disabling retired the webhook on the platform (a restart keeps it).
    assert [c.token for c in platform.of("deleteWebhook")] == ["999:new-token"]


async def test_a_channel_without_credentials_is_skipped(
    platform: PlatformServer, manager: ChannelManager, instance: Any
) -> None:
    config = await ChannelConfig.objects.acreate(instance=instance, kind="telegram", enabled=True)

    await manager.reconcile()

    assert manager.adapters == {}
    state = await ChannelState.objects.aget(config_id=config.pk)
    assert (state.status, state.reason) == ("stopped", "no credentials")
    assert platform.calls == []


async def test_without_a_public_url_telegram_is_long_polled(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
) -> None:
    settings.MESSAGING_PUBLIC_URL = ""
    platform.updates = [_update(50, "Polled hello")]
    script_turn(llm_script, "Polled answer.")

    await manager.reconcile()
    sent = await wait_calls(platform, "sendMessage")
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert [c.params["text"] for c in sent] == ["Polled answer."]
    assert len(platform.of("deleteWebhook")) == 1
    assert platform.of("setWebhook") == []
    polls = platform.of("getUpdates")
    assert polls[0].params["allowed_updates"] == ["message"]
    state = await ChannelState.objects.aget(config_id=telegram_channel.pk)
    assert state.mode == "polling"


async def test_a_polled_update_that_could_not_be_queued_is_polled_again(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_PUBLIC_URL = ""
    real_append = bursts.append
    failures = [redis.ConnectionError("Redis went away")]

    async def append_once_failing(*args: Any, **kwargs: Any) -> int:
        if failures:
            raise failures.pop()
        return await real_append(*args, **kwargs)

    monkeypatch.setattr(bursts, "append", append_once_failing)
    platform.updates = [_update(55, "Lost?")]
    script_turn(llm_script, "Not lost.")

    await manager.reconcile()
    sent = await wait_calls(platform, "sendMessage")
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert failures == []
    assert [c.params["text"] for c in sent] == ["Not lost."]
    # The failed poll did not confirm update 55; the one after the turn did.
    offsets = [c.params.get("offset") for c in platform.of("getUpdates")]
    assert offsets[:2] == [None, None]
    assert 56 in offsets
    assert platform.updates == []


async def test_a_burst_is_one_turn_and_a_message_during_a_turn_waits_for_it(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_BURST_S = 0.3
    await manager.reconcile()
    adapter = manager.adapters[telegram_channel.pk]
    lead = LeadGate(adapter.desk, monkeypatch)  # the three are waiting when the leader looks
    answer = SendGate(adapter, monkeypatch)  # the merged turn runs until this opens
    script_turn(llm_script, ["Merged ", "answer."])
    llm_script.requests.clear()

    for update_id, text in enumerate(["first", "second", "third"], start=60):
        await _post(telegram_channel, _update(update_id, text))
    lead.open()
    await answer.wait_reached()  # the merged turn runs
    script_turn(llm_script, "Queued answer.", first=False)
    await _post(telegram_channel, _update(70, "while you type"))
    during = (
        [r.messages[-1]["content"] for r in llm_script.requests if r.model == "standard"],
        adapter.desk.turns_started,
    )
    answer.open()
    await adapter.desk.idle()

    assert during == (["first\n\nsecond\n\nthird"], 1)
    mains = [r for r in llm_script.requests if r.model == "standard"]
    assert [m.messages[-1]["content"] for m in mains] == [
        "first\n\nsecond\n\nthird",
        "while you type",
    ]
    assert [c.params["text"] for c in platform.of("sendMessage")] == [
        "Merged answer.",
        "Queued answer.",
    ]
    assert adapter.desk.turns_started == 2


class FlakyTelegram(TelegramAdapter):
    """An adapter whose first two starts fail (a platform away for a moment)."""

    starts = 0

    async def start(self) -> None:
        FlakyTelegram.starts += 1
        if FlakyTelegram.starts <= 2:
            raise RuntimeError(f"unreachable, attempt {FlakyTelegram.starts}")
        await super().start()


async def test_a_channel_that_failed_to_start_is_retried_with_backoff(
    platform: PlatformServer, telegram_channel: ChannelConfig
) -> None:
    FlakyTelegram.starts = 0
    clock = [1000.0]
    manager = ChannelManager(
        factories={**default_factories(), "telegram": FlakyTelegram},
        retry_first_s=5.0,
        retry_max_s=300.0,
        clock=lambda: clock[0],
    )

    await manager.reconcile()  # attempt 1 fails: the next one after 5 s
    clock[0] += 4.0
    await manager.reconcile()  # too early
    first_error = await ChannelState.objects.aget(config_id=telegram_channel.pk)
    clock[0] += 1.0
    await manager.reconcile()  # attempt 2 fails: the next one after 10 s
    clock[0] += 9.0
    await manager.reconcile()  # too early
    attempts_before_due = FlakyTelegram.starts
    clock[0] += 1.0
    await manager.reconcile()  # attempt 3 starts it
    clock[0] += 60.0
    await manager.reconcile()  # running: nothing more

    assert first_error.status == "error"
    assert first_error.reason == "RuntimeError: unreachable, attempt 1"
    assert attempts_before_due == 2
    assert FlakyTelegram.starts == 3
    assert list(manager.adapters) == [telegram_channel.pk]
    state = await ChannelState.objects.aget(config_id=telegram_channel.pk)
    assert (state.status, state.reason) == ("running", "")
    assert (await ChannelConfig.objects.aget(pk=telegram_channel.pk)).last_error == ""
    await manager.stop_all()


async def test_disabling_a_webhook_channel_deletes_its_webhook_and_stopping_the_process_does_not(
    platform: PlatformServer, instance: Any, telegram_channel: ChannelConfig
) -> None:
    manager = ChannelManager()
    await manager.reconcile()
    await manager.stop_all()  # the process ends: the other processes keep the webhook
    deleted_on_process_stop = len(platform.of("deleteWebhook"))
    await manager.reconcile()
    await sync_to_async(channel_config_set)(instance=instance, kind="telegram", enabled=False)
    await manager.reconcile()

    assert deleted_on_process_stop == 0
    assert len(platform.of("setWebhook")) == 2
    assert len(platform.of("deleteWebhook")) == 1
    assert manager.adapters == {}


async def test_reconcile_before_the_migrations_is_a_note_and_other_sql_errors_a_traceback(
    settings: Any, caplog: Any, monkeypatch: Any
) -> None:
    settings.MESSAGING_RECONCILE_S = 0.01
    causes = [UndefinedTable('relation "instances_channelconfig" does not exist'), ValueError()]
    rounds: list[int] = []

    async def reconcile() -> None:
        cause = causes[len(rounds) % 2]
        rounds.append(1)
        raise ProgrammingError(str(cause)) from cause

    manager = ChannelManager()
    monkeypatch.setattr(manager, "reconcile", reconcile)
    stopping = asyncio.Event()
    caplog.set_level(logging.INFO, logger="messaging.manager")
    running = asyncio.create_task(manager.run(stopping))
    await _until(lambda: len(rounds) >= 2, "two rounds")
    stopping.set()
    await running

    waiting = [r for r in caplog.records if "once the database is migrated" in r.message]
    assert waiting
    # Said in words, not as the database's error text.
    assert all("relation" not in r.getMessage() for r in waiting)
    assert {(r.levelno, r.exc_info) for r in waiting} == {(logging.INFO, None)}
    failed = [r for r in caplog.records if r.message == "channel reconcile failed"]
    assert failed
    assert all(r.levelno == logging.ERROR and r.exc_info for r in failed)


class HangingTelegram(TelegramAdapter):
    """An adapter whose start (or stop) hangs until the test lets it go on."""

    go_on: asyncio.Event
    hang_on_stop = False

    async def start(self) -> None:
        if not self.hang_on_stop:
            await HangingTelegram.go_on.wait()
        await super().start()

    async def stop(self) -> None:
        if self.hang_on_stop:
            await HangingTelegram.go_on.wait()
        await super().stop()


async def test_a_hanging_start_does_not_delay_another_channel(
    platform: PlatformServer, telegram_channel: ChannelConfig, slack_channel: ChannelConfig
) -> None:
    HangingTelegram.go_on = asyncio.Event()
    HangingTelegram.hang_on_stop = False
    manager = ChannelManager(factories={**default_factories(), "telegram": HangingTelegram})

    # The Telegram channel comes first (lower id) and its start hangs.
    reconciling = asyncio.create_task(manager.reconcile())
    await _until(lambda: _status_is(slack_channel.pk, "running"), "Slack started")
    slack_running = slack_channel.pk in manager.adapters
    telegram_hanging = telegram_channel.pk not in manager.adapters and not reconciling.done()
    HangingTelegram.go_on.set()
    await asyncio.wait_for(reconciling, 20)

    assert telegram_channel.pk < slack_channel.pk
    assert telegram_hanging
    assert slack_running
    assert sorted(manager.adapters) == [telegram_channel.pk, slack_channel.pk]
    await manager.stop_all()


async def test_a_hanging_start_or_stop_is_given_up_after_its_timeout(
    platform: PlatformServer,
    instance: Any,
    telegram_channel: ChannelConfig,
    slack_channel: ChannelConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from messaging import manager as manager_module

    monkeypatch.setattr(manager_module, "START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(manager_module, "STOP_TIMEOUT_S", 0.5)
    HangingTelegram.go_on = asyncio.Event()  # never set
    HangingTelegram.hang_on_stop = False
    manager = ChannelManager(factories={**default_factories(), "telegram": HangingTelegram})

    await asyncio.wait_for(manager.reconcile(), 20)
    start_state = await ChannelState.objects.aget(config_id=telegram_channel.pk)
    HangingTelegram.hang_on_stop = True
    HangingTelegram.go_on.set()
    await sync_to_async(channel_config_set)(
        instance=instance, kind="telegram", credentials={"bot_token": "999:new-token"}
    )
    await asyncio.wait_for(manager.reconcile(), 20)  # the start goes through now
    HangingTelegram.go_on = asyncio.Event()  # and the stop hangs from here on
    await sync_to_async(channel_config_set)(instance=instance, kind="telegram", enabled=False)
    await sync_to_async(channel_config_set)(instance=instance, kind="slack", enabled=False)
    await asyncio.wait_for(manager.reconcile(), 20)

    assert (start_state.status, start_state.reason) == ("error", "did not start within 0.5 s")
    assert manager.adapters == {}
    states = {s.config_id: s.status async for s in ChannelState.objects.all()}
    assert states == {telegram_channel.pk: "stopped", slack_channel.pk: "stopped"}
