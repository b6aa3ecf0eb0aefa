"""The threads a turn's ``ThreadSensitiveContext`` costs (pipeline.runtime.turn_registry):
none for a turn whose ORM calls all go through ``db_call``, and a turn that did make a
thread-sensitive call has that thread's connection handed back (real Redis, PostgreSQL
and channel layer; scripted turns, no model)."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from pipeline import events as ev
from pipeline import runtime, state
from pipeline.runtime.turn_registry import TurnControl, TurnRegistry
from tests.pipeline.runtime_support import Recorder, fresh_channel_layer, task_record

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def registry() -> AsyncIterator[TurnRegistry]:
    async with fresh_channel_layer():
        started = runtime.registry("threads")
        await started.ensure_started()
        yield started
        await started.wait_idle()
        await started.stop()


def _turn(record: state.TaskRecord, during: Any = None) -> Any:
    async def turn(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        if during is not None:
            await during()
        yield ev.ReplyDelta(text="Hi")
        yield ev.StreamDone(
            chat_id=record.chat_id,
            task_id=record.task_id,
            message_id=record.assistant_message_id,
            content="Hi",
            model="scripted/standard",
            usage={"prompt_tokens": 1, "completion_tokens": 1},
            status="done",
        )

    return turn


def _count_thread_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return started


async def test_a_turn_without_thread_sensitive_calls_starts_no_thread(
    registry: TurnRegistry, cache_user_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first turn on this event loop starts its default executor's thread, once.
    first = task_record(user_id=cache_user_id, owner=registry.channel)
    await registry.start(record=first, factory=_turn(first), origin=Recorder())
    await registry.wait_idle()
    record = task_record(user_id=cache_user_id, owner=registry.channel)
    socket = Recorder()
    started = _count_thread_starts(monkeypatch)

    await registry.start(record=record, factory=_turn(record), origin=socket)
    await registry.wait_idle()

    assert socket.types() == ["message.accepted", "stream.delta", "stream.done"]
    # It made its context's executor and a thread to shut it down, to close nothing.
    assert started == []
    for ended in (first, record):
        await state.snapshot_drop(ended.task_id)


@pytest.mark.django_db(transaction=True)
async def test_a_turn_that_used_its_own_thread_hands_that_threads_connection_back(
    registry: TurnRegistry, cache_user_id: int
) -> None:
    record = task_record(user_id=cache_user_id, owner=registry.channel)
    used: list[Any] = []

    def query() -> None:
        connection = connections["default"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        used.append(connection)

    async def during() -> None:
        await sync_to_async(query)()  # thread-sensitive: the turn context's own thread

    socket = Recorder()
    await registry.start(record=record, factory=_turn(record, during), origin=socket)
    await registry.wait_idle()

    assert socket.types() == ["message.accepted", "stream.delta", "stream.done"]
    assert len(used) == 1
    assert used[0].connection is None
    await state.snapshot_drop(record.task_id)
