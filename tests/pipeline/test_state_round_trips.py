"""pipeline.state's Redis round trips on a turn's start (real Redis)."""

from __future__ import annotations

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
