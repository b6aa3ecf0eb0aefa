"""The reaper and the heartbeat (pipeline.runtime.reaper): a dead process's turn is failed
(both messages, the lease, the record, a ``stream.done`` to the user's sockets), never a
turn the calling process runs; leases expire unless renewed; the heartbeat vouches for
its turns, stops the flagged ones and saves their snapshots (real PostgreSQL, Redis,
Vault and channel layer)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from chats import cache as chat_cache
from chats import services as chat_services
from chats.models import Message
from openmates.db import db_call
from pipeline import events as ev
from pipeline import runtime, state
from pipeline.runtime import reaper
from pipeline.runtime.delivery import Delivery
from pipeline.runtime.turn_registry import ActiveTurn, TurnControl
from tests.pipeline.runtime_support import (
    Spawner,
    forget_turn,
    fresh_channel_layer,
    received,
    task_record,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]

DEAD_OWNER = "specific.dead!gone"


@pytest.fixture
async def layer() -> AsyncIterator[Any]:
    async with fresh_channel_layer() as channel_layer:
        yield channel_layer


@pytest.fixture
def handled() -> Any:
    """The records the orphan handlers were called with (a handler registered meanwhile)."""
    seen: list[state.TaskRecord] = []

    async def remember(record: state.TaskRecord) -> None:
        seen.append(record)

    reaper.on_orphan(remember)
    yield seen
    reaper._orphan_handlers.remove(remember)


async def _dead_turn(user_id: int | str, chat_id: str = "") -> state.TaskRecord:
    """What a process that died mid-turn left: lease, record, and a lapsed alive key."""
    record = task_record(user_id=user_id, chat_id=chat_id, owner=DEAD_OWNER)
    assert await state.lease_acquire_recorded(record) == 0
    await state.redis_client().delete(state._alive_key(record.task_id))
    return record


async def _accepted(chat: Any, user: Any, record: state.TaskRecord) -> None:
    def accept() -> None:
        chat_services.user_message_accept(chat=chat, message_id=record.message_id, user=user)
        chat_services.assistant_message_create(chat=chat, message_id=record.assistant_message_id)

    await db_call(accept)


async def _statuses(record: state.TaskRecord) -> list[str]:
    def read() -> list[str]:
        ids = [record.message_id, record.assistant_message_id]
        rows = dict(Message.objects.filter(pk__in=ids).values_list("id", "status"))
        return [str(rows[message_id]) for message_id in ids]

    return await db_call(read)


def _live(record: state.TaskRecord, spawn: Spawner, *, lease_held: bool = True) -> ActiveTurn:
    async def never(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        yield ev.ReplyDelta(text="")

    delivery = Delivery(record, spawn)
    return ActiveTurn(record=record, factory=never, delivery=delivery, lease_held=lease_held)


# --- the reaper --------------------------------------------------------------------------


async def test_a_dead_process_turn_is_reaped_its_messages_failed_and_the_sockets_told(
    chat: Any, user: Any, layer: Any
) -> None:
    record = await _dead_turn(user.pk, chat.pk)
    await _accepted(chat, user, record)
    listener = await layer.new_channel()
    await layer.group_add(runtime.user_group(user.pk), listener)
    assert await _statuses(record) == ["pending", "pending"]

    assert record.task_id in await reaper.reap_orphans()

    assert await _statuses(record) == ["failed", "failed"]
    assert await state.lease_holder(chat.pk) is None
    assert await state.record_get(record.task_id) is None
    assert record.task_id not in await state.running_task_ids()
    told = await received(layer, listener)
    assert told == {
        "type": "turn.frames",
        "task_id": record.task_id,
        "frames": [
            {
                "type": "stream.done",
                "chat_id": chat.pk,
                "task_id": record.task_id,
                "message_id": record.assistant_message_id,
                "content": "",
                "model": "",
                "usage": {"prompt_tokens": 0, "completion_tokens": 0},
                "status": "failed",
            }
        ],
    }
    await layer.group_discard(runtime.user_group(user.pk), listener)


async def test_a_reaped_turns_snapshot_keeps_its_text_and_says_it_failed(
    cache_user_id: int,
) -> None:
    record = await _dead_turn(cache_user_id)
    empty = await _dead_turn(cache_user_id)
    so_far = state.Snapshot(record.chat_id, record.assistant_message_id, 2, "Half a", None)
    await state.snapshot_save(user_id=cache_user_id, task_id=record.task_id, snapshot=so_far)
    try:
        reaped = await reaper.reap_orphans()
        assert {record.task_id, empty.task_id} <= set(reaped)

        kept = await state.snapshot_load(user_id=cache_user_id, task_id=record.task_id)
        assert kept == dataclasses.replace(so_far, status="failed")
        # The dead process had saved no snapshot yet: one says it failed, with no text.
        assert await state.snapshot_load(user_id=cache_user_id, task_id=empty.task_id) == (
            state.Snapshot(empty.chat_id, empty.assistant_message_id, 0, "", "failed")
        )
    finally:
        await state.snapshot_drop(record.task_id)
        await state.snapshot_drop(empty.task_id)


async def test_a_process_never_reaps_a_turn_it_runs_even_when_its_proof_of_life_lapsed(
    handled: list[state.TaskRecord],
) -> None:
    record = await _dead_turn(7)
    try:
        reaped = await reaper.reap_orphans(running_here={record.task_id})
        assert record.task_id not in reaped
        assert await state.record_get(record.task_id) == dataclasses.replace(
            record, state="running"
        )
        assert await state.lease_holder(record.chat_id) == record.task_id
        assert record.task_id not in [r.task_id for r in handled]
    finally:
        await forget_turn(record)


async def test_a_turn_whose_process_still_vouches_for_it_is_not_reaped(
    handled: list[state.TaskRecord],
) -> None:
    record = await _dead_turn(7)
    await state.alive_refresh([record.task_id])
    try:
        assert record.task_id not in await reaper.reap_orphans()
        assert await state.record_get(record.task_id) is not None
        assert handled == []
    finally:
        await forget_turn(record)


async def test_a_task_id_without_a_record_leaves_the_worklist() -> None:
    record = await _dead_turn(7)
    await state.redis_client().delete(state._record_key(record.task_id))

    assert record.task_id not in await reaper.reap_orphans()
    assert record.task_id not in await state.running_task_ids()
    await forget_turn(record)


async def test_two_reapers_end_a_dead_turn_once(handled: list[state.TaskRecord]) -> None:
    record = await _dead_turn(7)

    first, second = await asyncio.gather(reaper.reap_orphans(), reaper.reap_orphans())

    assert (first + second).count(record.task_id) == 1
    assert [r.task_id for r in handled].count(record.task_id) == 1


async def test_a_failing_handler_is_logged_and_the_others_still_run(
    handled: list[state.TaskRecord], caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(record: state.TaskRecord) -> None:
        raise RuntimeError("database away")

    reaper._orphan_handlers.insert(0, broken)
    record = task_record()
    try:
        with caplog.at_level(logging.ERROR, logger="pipeline.runtime.reaper"):
            await reaper.orphan_fail(record)
    finally:
        reaper._orphan_handlers.remove(broken)

    assert f"reaper: handler failed for task {record.task_id}" in caplog.text
    assert handled == [record]


# --- leases and the heartbeat ------------------------------------------------------------


async def test_a_lease_expires_unless_the_heartbeat_renews_it(settings: Any) -> None:
    settings.PIPELINE_LEASE_TTL_S = 1.5
    record, other = task_record(), task_record()
    other = dataclasses.replace(other, chat_id=record.chat_id)
    spawn = Spawner()
    heartbeat = reaper.Heartbeat({record.task_id: _live(record, spawn)}, lambda _: None)
    heartbeat.last_reap = time.monotonic()  # no reaping in this test
    client = state.redis_client()
    try:
        assert await state.lease_acquire(chat_id=record.chat_id, task_id=record.task_id) == 0
        await asyncio.sleep(0.9)
        await heartbeat.beat(renew=True)
        assert await client.pttl(state._lease_key(record.chat_id)) > 1000
        await asyncio.sleep(0.9)  # 1.8 s after it was taken: held thanks to the renewal
        assert await state.lease_holder(record.chat_id) == record.task_id
        assert await state.lease_acquire(chat_id=record.chat_id, task_id=other.task_id) == 1

        await asyncio.sleep(1.7)  # no renewal: it expires
        assert await state.lease_holder(record.chat_id) is None
        assert await state.lease_acquire(chat_id=record.chat_id, task_id=other.task_id) == 0
    finally:
        await forget_turn(record)
        await forget_turn(other)


async def test_the_heartbeat_vouches_for_its_turns_and_stops_the_flagged_and_deleted(
    cache_user_id: int,
) -> None:
    spawn = Spawner()
    flagged, deleted, plain = (task_record(user_id=cache_user_id) for _ in range(3))
    turns = {r.task_id: _live(r, spawn, lease_held=False) for r in (flagged, deleted, plain)}
    stopped: list[str] = []
    heartbeat = reaper.Heartbeat(turns, stopped.append)
    heartbeat.last_reap = time.monotonic()
    await state.cancel_flag_set(flagged.task_id)
    await chat_cache.achat_forget(user_id=cache_user_id, chat_id=deleted.chat_id)
    client = state.redis_client()
    try:
        await heartbeat.beat(renew=True)

        assert sorted(stopped) == sorted([flagged.task_id, deleted.task_id])
        for record in (flagged, deleted, plain):
            alive_ms = await client.pttl(state._alive_key(record.task_id))
            assert 0 < alive_ms <= state.alive_ttl_s() * 1000
    finally:
        for record in (flagged, deleted, plain):
            await forget_turn(record)
            await client.delete(state._cancel_key(record.task_id))


async def test_the_heartbeat_saves_dirty_snapshots_but_not_those_of_finishing_turns(
    cache_user_id: int,
) -> None:
    spawn = Spawner()
    running, finishing = task_record(user_id=cache_user_id), task_record(user_id=cache_user_id)
    turns = {r.task_id: _live(r, spawn) for r in (running, finishing)}
    for turn in turns.values():
        await turn.delivery.add_text("So far")
    turns[finishing.task_id].finishing = True
    heartbeat = reaper.Heartbeat(turns, lambda _: None)
    heartbeat.last_reap = time.monotonic()
    try:
        await heartbeat.beat(renew=False)

        saved = await state.snapshot_load(user_id=cache_user_id, task_id=running.task_id)
        assert saved is not None
        assert (saved.sequence, saved.content, saved.status) == (1, "So far", None)
        assert not turns[running.task_id].delivery.snapshot_dirty
        assert await state.snapshot_load(user_id=cache_user_id, task_id=finishing.task_id) is None
        assert turns[finishing.task_id].delivery.snapshot_dirty
    finally:
        for record in (running, finishing):
            await forget_turn(record)


async def test_the_heartbeat_reaps_once_per_reap_period_and_spares_its_own_turns(
    handled: list[state.TaskRecord],
) -> None:
    spawn = Spawner()
    own, first_dead, later_dead = await _dead_turn(7), await _dead_turn(7), await _dead_turn(7)
    heartbeat = reaper.Heartbeat({own.task_id: _live(own, spawn)}, lambda _: None)
    try:
        await heartbeat.beat(renew=False)  # the first beat reaps: last_reap is 0
        reaped = {r.task_id for r in handled}
        assert first_dead.task_id in reaped
        assert later_dead.task_id in reaped  # dead by then too
        assert own.task_id not in reaped

        late = await _dead_turn(7)
        await heartbeat.beat(renew=False)  # within REAP_EVERY_S of the last reaping
        assert late.task_id not in {r.task_id for r in handled}
        heartbeat.last_reap -= reaper.REAP_EVERY_S
        await heartbeat.beat(renew=False)
        assert late.task_id in {r.task_id for r in handled}
        assert await state.record_get(own.task_id) is not None
    finally:
        await forget_turn(own)
