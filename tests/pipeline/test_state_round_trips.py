"""pipeline.state's Redis round trips on a turn's start (real Redis)."""

from __future__ import annotations

import dataclasses
import uuid

from pipeline import state
from tests.redis_round_trips import round_trips


async def test_taking_a_free_lease_is_one_round_trip_that_also_vouches_for_the_task() -> None:
    chat_id, task_id = str(uuid.uuid4()), str(uuid.uuid4())
    client = state.redis_client()
    await client.ping()  # a warm connection: no handshake in the count
    try:
        with round_trips() as count:
            position = await state.lease_acquire(chat_id=chat_id, task_id=task_id)
        assert count[0] == 1
        assert position == 0
        assert await state.lease_holder(chat_id) == task_id
        alive_ms = await client.pttl(state._alive_key(task_id))
        assert 0 < alive_ms <= state.alive_ttl_s() * 1000
    finally:
        await state.lease_release(chat_id=chat_id, task_id=task_id)
        await client.delete(state._alive_key(task_id))


async def test_a_second_task_queues_behind_the_lease_and_is_kept_alive_while_it_waits() -> None:
    chat_id = str(uuid.uuid4())
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    client = state.redis_client()
    try:
        assert await state.lease_acquire(chat_id=chat_id, task_id=first) == 0
        assert await state.lease_acquire(chat_id=chat_id, task_id=second) == 1
        assert await client.pttl(state._alive_key(second)) > 0
        await state.lease_release(chat_id=chat_id, task_id=first)
        assert await state.lease_acquire(chat_id=chat_id, task_id=second) == 0
        assert await state.lease_holder(chat_id) == second
    finally:
        for task_id in (first, second):
            await state.lease_release(chat_id=chat_id, task_id=task_id)
            await client.delete(state._alive_key(task_id))


def _record(chat_id: str, user_id: str = "7") -> state.TaskRecord:
    return state.TaskRecord(
        task_id=str(uuid.uuid4()),
        user_id=user_id,
        chat_id=chat_id,
        message_id=str(uuid.uuid4()),
        assistant_message_id=str(uuid.uuid4()),
        owner="specific.test!owner",
        state="queued",
    )


async def test_a_turn_takes_its_lease_and_saves_its_record_in_one_round_trip() -> None:
    chat_id = str(uuid.uuid4())
    first, second = _record(chat_id), _record(chat_id)
    client = state.redis_client()
    await client.ping()
    try:
        with round_trips() as count:
            assert await state.lease_acquire_recorded(first) == 0
        assert count[0] == 1
        assert await state.record_get(first.task_id) == dataclasses.replace(first, state="running")
        assert await state.lease_acquire_recorded(second) == 1
        assert await state.record_get(second.task_id) == second  # state queued
        assert {r.task_id for r in await state.user_records("7")} >= {
            first.task_id,
            second.task_id,
        }
        assert {first.task_id, second.task_id} <= set(await state.running_task_ids())
        assert await client.ttl(state._record_key(first.task_id)) > 0
        assert await state.is_alive(second)
    finally:
        for record in (first, second):
            await state.lease_release(chat_id=chat_id, task_id=record.task_id)
            await state.record_delete(record)
