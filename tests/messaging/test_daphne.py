"""The channel manager inside real Daphne processes (docs/channels.md §2, §5,
docs/deployment.md §7): started by ``MessagingConfig.ready`` on its own loop and thread,
it picks up a Telegram channel created while the server runs, sets its webhook on the
loopback fake platform (``tests.messaging.platform``), and a webhook update posted to
Daphne is answered there through the pipeline, its model played by a loopback
OpenAI-format server. Two Daphnes on one database and Redis stand for a load-balanced
deployment: the two messages of one burst, posted one to each, are one turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chats.models import Message
from chats.services import sealed_text_open
from instances.services import channel_config_set
from messaging.adapters.telegram import SECRET_HEADER, webhook_secret
from messaging.models import ChannelIdentity, ChannelState
from tests.messaging.conftest import TELEGRAM_TOKEN
from tests.messaging.platform import PlatformServer
from tests.ui.conftest import daphne_serving
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def model() -> Iterator[UIModelServer]:
    server = UIModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fake_platform() -> Iterator[PlatformServer]:
    server = PlatformServer().start()
    yield server
    server.stop()


def _channel_env(model: UIModelServer, fake_platform: PlatformServer) -> dict[str, str]:
    env = {
        "OPENAI_API_KEY": "sk-channels-test",
        "MESSAGING_TELEGRAM_API_BASE": f"{fake_platform.url}/bot",
        "MESSAGING_PUBLIC_URL": "https://mates.example",
        "MESSAGING_RECONCILE_S": "0.2",
        # Room for two requests to two processes within one burst on a busy machine.
        # Live servers cannot be gated: a burst long enough for two posts on a loaded
        # machine.
        "MESSAGING_BURST_S": "3.0",
    }
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = model.api_base
    return env


@pytest.fixture(scope="module")
def channel_server(
    django_db_setup: Any,
    model: UIModelServer,
    fake_platform: PlatformServer,
    tmp_path_factory: Any,
) -> Iterator[str]:
    """A live Daphne whose channel manager talks to ``fake_platform``."""
    logs = tmp_path_factory.mktemp("daphne-channels")
    with daphne_serving(_channel_env(model, fake_platform), logs) as base:
        yield base
    # The manager's first reconcile waits until every app is ready.
    assert (
        "Accessing the database during app initialization" not in (logs / "daphne.log").read_text()
    )


@pytest.fixture(scope="module")
def second_server(
    channel_server: str,
    model: UIModelServer,
    fake_platform: PlatformServer,
    tmp_path_factory: Any,
) -> Iterator[str]:
    """A second live Daphne of the same deployment (same database, Redis, platform)."""
    logs = tmp_path_factory.mktemp("daphne-channels-2")
    with daphne_serving(_channel_env(model, fake_platform), logs) as base:
        yield base


def _running_in(fake_platform: PlatformServer, config_id: int, processes: int) -> None:
    """Wait until ``processes`` servers have set the channel's webhook (30 s at most)."""
    url = f"https://mates.example/channels/telegram/{config_id}/"
    deadline = time.monotonic() + 30
    while len([c for c in fake_platform.of("setWebhook") if c.params["url"] == url]) < processes:
        assert time.monotonic() < deadline, "the channel never ran in every process"
        time.sleep(0.05)


def _update(update_id: int, text: str, user_id: int) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": int(time.time()), "text": text,
        "chat": {"id": user_id, "type": "private"},
        "from": {"id": user_id, "is_bot": False, "first_name": "Ann"}}}  # fmt: skip


def test_a_telegram_message_is_answered_by_a_live_daphne(
    channel_server: str, model: UIModelServer, fake_platform: PlatformServer, instance: Any
) -> None:
    model.reset()
    model.queue(Turn(pieces=["Hello ", "from ", "Daphne."], gap_s=0))
    config = channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": TELEGRAM_TOKEN}, enabled=True
    )
    webhook = fake_platform.wait_for("setWebhook", timeout_s=30)[0]
    deadline = time.monotonic() + 10
    while not ChannelState.objects.filter(config_id=config.pk, status="running").exists():
        assert time.monotonic() < deadline, "the channel never ran"
        time.sleep(0.05)
    update = {"update_id": 9001, "message": {
        "message_id": 1, "date": int(time.time()), "text": "Hi there",
        "chat": {"id": 77, "type": "private"},
        "from": {"id": 77, "is_bot": False, "first_name": "Ann"}}}  # fmt: skip
    secret = webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=config.pk)
    url = f"{channel_server}/channels/telegram/{config.pk}/"

    forged = httpx.post(url, json=update, headers={SECRET_HEADER: "wrong"}, timeout=10)
    taken = httpx.post(url, json=update, headers={SECRET_HEADER: secret}, timeout=10)
    sent = fake_platform.wait_for("sendMessage", timeout_s=30)

    assert webhook.params["url"] == f"https://mates.example/channels/telegram/{config.pk}/"
    assert webhook.params["secret_token"] == secret
    assert (forged.status_code, taken.status_code) == (403, 200)
    assert [(c.params["chat_id"], c.params["text"]) for c in sent] == [(77, "Hello from Daphne.")]
    state = ChannelState.objects.get(config_id=config.pk)
    assert (state.status, state.mode) == ("running", "webhook")
    assert state.last_update_at is not None


def test_one_burst_posted_to_two_live_daphnes_is_one_turn(
    channel_server: str,
    second_server: str,
    model: UIModelServer,
    fake_platform: PlatformServer,
    instance: Any,
) -> None:
    model.reset()
    model.queue(Turn(pieces=["Both ", "read."], gap_s=0))
    config = channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": TELEGRAM_TOKEN}, enabled=True
    )
    _running_in(fake_platform, config.pk, processes=2)
    headers = {SECRET_HEADER: webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=config.pk)}
    path = f"/channels/telegram/{config.pk}/"
    chat_id = 88
    earlier = len(fake_platform.of("sendMessage"))  # the module's other tests

    first = httpx.post(channel_server + path, json=_update(9101, "first", chat_id),
                       headers=headers, timeout=10)  # fmt: skip
    second = httpx.post(second_server + path, json=_update(9102, "second", chat_id),
                        headers=headers, timeout=10)  # fmt: skip
    sent = fake_platform.wait_for("sendMessage", earlier + 1, timeout_s=30)[earlier:]
    identity = ChannelIdentity.objects.get(platform_user_id=str(chat_id))
    deadline = time.monotonic() + 30
    while Message.objects.filter(chat__owner_id=identity.user_id, status="done").count() < 2:
        assert time.monotonic() < deadline, "the turn never finished"
        time.sleep(0.05)

    assert (first.status_code, second.status_code) == (200, 200)
    to_chat = [c.params["text"] for c in sent if c.params["chat_id"] == chat_id]
    assert to_chat == ["Both read."]
    messages = Message.objects.filter(chat__owner_id=identity.user_id).order_by("chat_version")
    assert [m.role for m in messages] == ["user", "assistant"]
    assert (
        sealed_text_open(
            owner_id=identity.user_id,
            object_id=messages[0].pk,
            sealed=messages[0].server_content or b"",
        )
        == "first\n\nsecond"
    )
    asked = [
        str(r["messages"][-1].get("content")) for r in model.state.requests if r.get("messages")
    ]
    assert "first\n\nsecond" in asked
    assert "first" not in asked
    assert "second" not in asked
    assert len(fake_platform.of("sendMessage")) == earlier + 1  # no second answer came since
