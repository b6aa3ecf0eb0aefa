"""Bursts across server processes (docs/channels.md §5): two channel managers on one
Redis stand for two processes behind a load balancer, each webhook request going to the
one the test installs for the views. The messages of one burst make one turn wherever
they land; two people make two turns; a message after the burst, or while the turn runs,
is the next turn; a leader that dies loses nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from chats.models import Chat, Message
from chats.services import sealed_text_open
from instances.models import ChannelConfig
from messaging import bursts, runtime
from messaging.adapters.base import Desk, seen_key
from messaging.adapters.telegram import SECRET_HEADER, webhook_secret
from messaging.manager import ChannelManager
from messaging.models import ChannelConversation
from openmates.redis_client import async_client
from tests.messaging.conftest import (
    TELEGRAM_TOKEN,
    LeadGate,
    SendGate,
    script_turn,
)
from tests.messaging.platform import PlatformServer

pytestmark = pytest.mark.django_db(transaction=True)


def _update(update_id: int, text: str, user_id: int = 7) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000, "text": text,
        "chat": {"id": user_id, "type": "private"},
        "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}}}  # fmt: skip


async def _post(process: ChannelManager, config: ChannelConfig, payload: Any) -> int:
    """Deliver a webhook request to ``process`` (the one the load balancer picked)."""
    runtime.install(process, asyncio.get_running_loop())
    response = await AsyncClient().post(
        f"/channels/telegram/{config.pk}/",
        data=json.dumps(payload),
        content_type="application/json",
        headers={SECRET_HEADER: webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=config.pk)},
    )
    return int(response.status_code)


@pytest.fixture
async def other(platform: PlatformServer) -> AsyncIterator[ChannelManager]:
    """A second process's channel manager (same Redis and database, its own adapters)."""
    process = ChannelManager()
    yield process
    await process.stop_all()


async def _idle(*processes: ChannelManager) -> None:
    for process in processes:
        for adapter in list(process.adapters.values()):
            await adapter.desk.idle()


def _main_texts(llm_script: Any) -> list[str]:
    """The user message of each main-model call, in order."""
    return [r.messages[-1]["content"] for r in llm_script.requests if r.model == "standard"]


def _conversation_texts(user_id: int) -> list[tuple[str, str]]:
    """(role, text) of every message of the pseudo-user ``user_id``'s conversations."""
    rows = []
    for chat in Chat.objects.filter(owner_id=user_id).order_by("created_at"):
        for message in Message.objects.filter(chat=chat).order_by("chat_version"):
            rows.append(
                (
                    message.role,
                    sealed_text_open(
                        owner_id=user_id, object_id=message.pk, sealed=message.server_content or b""
                    ),
                )
            )
    return rows


async def _telegram_user(platform_user_id: str) -> int:
    conversation = await ChannelConversation.objects.select_related("identity").aget(
        identity__platform_user_id=platform_user_id
    )
    return conversation.identity.user_id


async def _gone(key: str) -> None:
    """Wait until ``key`` has expired in Redis (5 s at most)."""
    for _ in range(250):
        if not await async_client().exists(key):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key} never expired")


async def test_one_burst_over_two_processes_is_one_turn_with_both_texts_in_order(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_BURST_S = 0.5
    await manager.reconcile()
    await other.reconcile()
    # The leader looks only once all are posted, however slowly the posts go.
    gate = LeadGate(manager.adapters[telegram_channel.pk].desk, monkeypatch)
    script_turn(llm_script, "One answer.")

    statuses = [
        await _post(manager, telegram_channel, _update(1, "first")),
        await _post(other, telegram_channel, _update(2, "second")),
        await _post(manager, telegram_channel, _update(2, "second")),  # redelivered elsewhere
    ]
    gate.open()
    await _idle(manager, other)

    assert statuses == [200, 200, 200]
    assert _main_texts(llm_script) == ["first\n\nsecond"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["One answer."]
    desks = (manager.adapters[telegram_channel.pk].desk, other.adapters[telegram_channel.pk].desk)
    assert [d.turns_started for d in desks] == [1, 0]  # the first message's process led
    user_id = await _telegram_user("7")
    assert await sync_to_async(_conversation_texts)(user_id) == [
        ("user", "first\n\nsecond"),
        ("assistant", "One answer."),
    ]
    # Nothing is left waiting, and the texts waited sealed (never plaintext in Redis).
    assert await bursts.lines_waiting(telegram_channel.pk) == []


async def test_a_waiting_text_is_sealed_in_redis(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await manager.reconcile()
    desk = manager.adapters[telegram_channel.pk].desk
    monkeypatch.setattr(Desk, "_lead", lambda self, line, token: None)  # no turn yet

    await _post(manager, telegram_channel, _update(5, "my secret plans"))

    (line,) = await bursts.lines_waiting(telegram_channel.pk)
    (stored,) = await async_client().lrange(line.key("pending"), 0, -1)
    raw = stored if isinstance(stored, bytes) else stored.encode()
    item = json.loads(raw)
    assert line.line == "7:/7"
    assert b"secret" not in raw
    assert set(item) == {"user_id", "platform_user_id", "chat_key", "target", "new",
                         "object_id", "sealed"}  # fmt: skip
    assert (item["chat_key"], item["target"], item["object_id"]) == (
        "7:",
        {"chat_id": 7, "thread_id": None},
        f"channel:{telegram_channel.pk}:u5",
    )
    opened = await desk._open([raw.decode()])
    assert [m.text for m in opened] == ["my secret plans"]
    await async_client().delete(*(line.key(p) for p in ("pending", "times", "leader")), line.index)


async def test_two_people_over_two_processes_are_two_turns(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
) -> None:
    settings.MESSAGING_BURST_S = 0.3
    await manager.reconcile()
    await other.reconcile()
    script_turn(llm_script, "An answer.")
    script_turn(llm_script, "An answer.")

    await _post(manager, telegram_channel, _update(10, "I am Ann", user_id=1))
    await _post(other, telegram_channel, _update(11, "I am Bob", user_id=2))
    await _idle(manager, other)

    assert sorted(_main_texts(llm_script)) == ["I am Ann", "I am Bob"]
    assert sorted(c.params["chat_id"] for c in platform.of("sendMessage")) == [1, 2]
    desks = (manager.adapters[telegram_channel.pk].desk, other.adapters[telegram_channel.pk].desk)
    assert [d.turns_started for d in desks] == [1, 1]
    ann, bob = await _telegram_user("1"), await _telegram_user("2")
    assert ann != bob
    assert [t for _, t in await sync_to_async(_conversation_texts)(ann)] == [
        "I am Ann",
        "An answer.",
    ]
    assert [t for _, t in await sync_to_async(_conversation_texts)(bob)] == [
        "I am Bob",
        "An answer.",
    ]


async def test_a_message_after_the_burst_is_a_second_turn_led_by_its_own_process(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
) -> None:
    settings.MESSAGING_BURST_S = 0.2
    await manager.reconcile()
    await other.reconcile()
    script_turn(llm_script, "First answer.")
    await _post(manager, telegram_channel, _update(20, "first"))
    await _idle(manager, other)  # the burst ended, its turn ran, the lead was given up
    script_turn(llm_script, "Second answer.", first=False)

    await _post(other, telegram_channel, _update(21, "later"))
    await _idle(manager, other)

    assert _main_texts(llm_script) == ["first", "later"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == [
        "First answer.",
        "Second answer.",
    ]
    desks = (manager.adapters[telegram_channel.pk].desk, other.adapters[telegram_channel.pk].desk)
    assert [d.turns_started for d in desks] == [1, 1]
    # One conversation: the second turn continued the first.
    assert await ChannelConversation.objects.acount() == 1
    assert await Chat.objects.acount() == 1


async def test_a_message_to_another_process_while_the_turn_runs_is_the_next_turn(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_BURST_S = 0.2
    await manager.reconcile()
    await other.reconcile()
    leader = manager.adapters[telegram_channel.pk]
    gate = SendGate(leader, monkeypatch)  # the first turn runs until the gate opens
    script_turn(llm_script, "First answer.")
    await _post(manager, telegram_channel, _update(30, "first"))
    await gate.wait_reached()
    script_turn(llm_script, "Queued answer.", first=False)

    await _post(other, telegram_channel, _update(31, "meanwhile"))
    await _post(other, telegram_channel, _update(32, "and this"))
    (line,) = await bursts.lines_waiting(telegram_channel.pk)
    during = (
        dict(other.adapters[telegram_channel.pk].desk.workers),
        leader.desk.turns_started,
        await async_client().exists(line.key("leader")),
        _main_texts(llm_script),
    )
    gate.open()
    await _idle(manager, other)

    assert during == ({}, 1, 1, ["first"])
    assert _main_texts(llm_script) == ["first", "meanwhile\n\nand this"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == [
        "First answer.",
        "Queued answer.",
    ]
    desks = (manager.adapters[telegram_channel.pk].desk, other.adapters[telegram_channel.pk].desk)
    assert [d.turns_started for d in desks] == [2, 0]  # the leader went on with the line


async def test_when_the_leader_dies_before_its_turn_the_next_message_takes_over(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_BURST_S = 0.2
    monkeypatch.setattr(bursts, "LEADER_LEASE_S", 1.0)
    await manager.reconcile()
    await other.reconcile()
    dead = manager.adapters[telegram_channel.pk].desk
    # The first process dies right after queueing the message and taking the lead.
    monkeypatch.setattr(dead, "_lead", lambda line, token: None)
    await _post(manager, telegram_channel, _update(40, "first"))
    (line,) = await bursts.lines_waiting(telegram_channel.pk)
    await _gone(line.key("leader"))
    # The next leader's lease is the usual one: its turn may hold the loop for a second.
    monkeypatch.setattr(bursts, "LEADER_LEASE_S", 10.0)
    script_turn(llm_script, "Both answered.")

    await _post(other, telegram_channel, _update(41, "second"))
    await _idle(manager, other)

    assert _main_texts(llm_script) == ["first\n\nsecond"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Both answered."]
    assert other.adapters[telegram_channel.pk].desk.turns_started == 1
    assert await bursts.lines_waiting(telegram_channel.pk) == []


async def test_when_the_leader_dies_after_taking_the_batch_a_sweep_runs_it(
    platform: PlatformServer,
    manager: ChannelManager,
    other: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MESSAGING_BURST_S = 0.1
    monkeypatch.setattr(bursts, "LEADER_LEASE_S", 1.0)
    await manager.reconcile()
    await other.reconcile()
    dead = manager.adapters[telegram_channel.pk].desk
    frozen = asyncio.Event()
    took: list[tuple[str, ...]] = []

    async def hang(items: tuple[str, ...], settle: Any) -> None:
        took.append(items)
        frozen.set()
        await asyncio.Event().wait()  # the process stops here: no turn, no renewal

    async def no_renewal(line: Any, token: str) -> None:
        return None

    monkeypatch.setattr(dead, "_answer", hang)
    monkeypatch.setattr(dead, "_keep", no_renewal)
    gate = LeadGate(dead, monkeypatch)  # both are waiting when it takes the batch
    await _post(manager, telegram_channel, _update(50, "first"))
    await _post(manager, telegram_channel, _update(51, "second"))
    gate.open()
    await asyncio.wait_for(frozen.wait(), 5)
    (line,) = await bursts.lines_waiting(telegram_channel.pk)
    await _gone(line.key("leader"))
    # The next leader's lease is the usual one: its turn may hold the loop for a second.
    monkeypatch.setattr(bursts, "LEADER_LEASE_S", 10.0)
    script_turn(llm_script, "Recovered.")

    await other.reconcile()  # every process sweeps at each reconcile
    await other.adapters[telegram_channel.pk].desk.idle()

    assert len(took[0]) == 2  # the dead process had taken both
    assert _main_texts(llm_script) == ["first\n\nsecond"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Recovered."]
    assert other.adapters[telegram_channel.pk].desk.turns_started == 1
    assert await bursts.lines_waiting(telegram_channel.pk) == []


async def test_a_burst_waits_at_most_the_maximum_after_its_first_message(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    settings: Any,
) -> None:
    # A burst of 30 s would outlast the test: only the cap of 1 s can end it while a
    # message follows every 0.1 s.
    settings.MESSAGING_BURST_S = 30.0
    settings.MESSAGING_BURST_MAX_S = 1.0
    await manager.reconcile()
    script_turn(llm_script, "Capped.")
    script_turn(llm_script, "Rest.", first=False)

    # Messages go on until the first turn runs, and one more follows.
    sent = []
    started = asyncio.get_running_loop().time()
    for update_id in range(100, 400):
        await _post(manager, telegram_channel, _update(update_id, f"m{update_id}"))
        sent.append(f"m{update_id}")
        if platform.of("sendChatAction"):
            break
        await asyncio.sleep(0.1)
    capped_after_s = asyncio.get_running_loop().time() - started
    await _post(manager, telegram_channel, _update(400, "m400"))
    sent.append("m400")
    await _idle(manager)

    first, second = _main_texts(llm_script)
    assert platform.of("sendChatAction")
    assert capped_after_s < settings.MESSAGING_BURST_S
    assert f"{first}\n\n{second}".split("\n\n") == sent
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Capped.", "Rest."]


async def test_an_update_that_could_not_be_queued_is_taken_when_redelivered(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await manager.reconcile()
    real_append = bursts.append
    failures = [redis.ConnectionError("Redis went away")]

    async def append_once_failing(*args: Any, **kwargs: Any) -> int:
        if failures:
            raise failures.pop()
        return await real_append(*args, **kwargs)

    monkeypatch.setattr(bursts, "append", append_once_failing)
    script_turn(llm_script, "Got it the second time.")
    runtime.install(manager, asyncio.get_running_loop())
    client = AsyncClient(raise_request_exception=False)
    headers = {
        SECRET_HEADER: webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=telegram_channel.pk)
    }
    url = f"/channels/telegram/{telegram_channel.pk}/"
    body = json.dumps(_update(70, "are you there"))

    failed = await client.post(url, data=body, content_type="application/json", headers=headers)
    redelivered = await _post(manager, telegram_channel, _update(70, "are you there"))
    await _idle(manager)

    assert (failed.status_code, redelivered) == (500, 200)
    assert _main_texts(llm_script) == ["are you there"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Got it the second time."]


async def test_a_process_dying_before_the_append_leaves_the_update_to_its_redelivery(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[telegram_channel.pk]
    real_append = bursts.append
    seen = seen_key(config_id=telegram_channel.pk, delivery_id="u80")

    async def dying_append(*args: Any, **kwargs: Any) -> int:
        raise asyncio.CancelledError  # the process is stopped between dedup and queueing

    monkeypatch.setattr(bursts, "append", dying_append)
    with pytest.raises(asyncio.CancelledError):
        await adapter.handle(_update(80, "do not lose me"))
    marked_after_dying = await async_client().exists(seen)
    monkeypatch.setattr(bursts, "append", real_append)
    script_turn(llm_script, "Not lost.")

    await adapter.handle(_update(80, "do not lose me"))  # Telegram redelivers it
    await adapter.handle(_update(80, "do not lose me"))  # and once more
    await _idle(manager)

    assert marked_after_dying == 0
    assert await async_client().exists(seen) == 1
    assert _main_texts(llm_script) == ["do not lose me"]
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Not lost."]


async def test_an_append_marks_its_update_seen_and_refuses_a_seen_one(
    platform: PlatformServer, telegram_channel: ChannelConfig
) -> None:
    line = bursts.Line(config_id=telegram_channel.pk, line="9:/9")
    seen = seen_key(config_id=telegram_channel.pk, delivery_id="u90")

    first = await bursts.append(line, '{"n": 1}', token="a", ttl_s=60, seen_key=seen)
    again = await bursts.append(line, '{"n": 1}', token="b", ttl_s=60, seen_key=seen)
    other = await bursts.append(line, '{"n": 2}', token="c", ttl_s=60, seen_key=f"{seen[:-3]}u91")

    assert (first, again, other) == (bursts.LEADING, bursts.DUPLICATE, bursts.QUEUED)
    assert await async_client().lrange(line.key("pending"), 0, -1) == [b'{"n": 1}', b'{"n": 2}']
    assert 0 < await async_client().pttl(seen) <= 60_000
    await async_client().delete(
        *(line.key(p) for p in ("pending", "times", "leader")), line.index, seen
    )
