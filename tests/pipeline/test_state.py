"""pipeline.state's accessors on real Redis and Vault: the chat's lease and queue, task
records and proof of life, cancel flags, sealed snapshots, kept user text, the chat's
notes, history requests, memory consent and rate limits."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chats import cache as chat_cache
from openmates import crypto, vault
from openmates.crypto import DecryptionError
from pipeline import state
from pipeline.ids import new_id
from tests.pipeline.runtime_support import forget_turn, task_record
from tests.redis_round_trips import round_trips

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def other_user_id() -> Iterator[int]:
    """A second user id with its own transit key."""
    user_id = 10_000_000 + secrets.randbelow(80_000_000)
    vault.ensure_key(vault.user_key_name(user_id))
    yield user_id
    vault.delete_key(vault.user_key_name(user_id))
    crypto.forget_key(vault.user_key_name(user_id))


async def _queue(chat_id: str) -> list[str]:
    waiting = await state.redis_client().lrange(state._queue_key(chat_id), 0, -1)
    return [state._str(task_id) for task_id in waiting]


# --- leases and the queue --------------------------------------------------------------


async def test_waiters_queue_in_order_and_the_head_takes_the_lease_when_it_is_free() -> None:
    chat_id = new_id()
    first, second, third = new_id(), new_id(), new_id()
    try:
        positions = [
            await state.lease_acquire(chat_id=chat_id, task_id=task_id)
            for task_id in (first, second, third)
        ]
        assert positions == [0, 1, 2]
        assert await state.lease_acquire(chat_id=chat_id, task_id=third) == 2  # same place
        await state.lease_release(chat_id=chat_id, task_id=first)
        assert await state.lease_acquire(chat_id=chat_id, task_id=third) == 2  # not its turn
        assert await state.lease_acquire(chat_id=chat_id, task_id=second) == 0
        assert await _queue(chat_id) == [third]
    finally:
        for task_id in (first, second, third):
            await state.lease_release(chat_id=chat_id, task_id=task_id)


async def test_a_waiter_whose_process_stopped_vouching_for_it_is_skipped() -> None:
    chat_id = new_id()
    holder, dead, alive = new_id(), new_id(), new_id()
    try:
        for task_id in (holder, dead, alive):
            await state.lease_acquire(chat_id=chat_id, task_id=task_id)
        await state.redis_client().delete(state._alive_key(dead))
        await state.lease_release(chat_id=chat_id, task_id=holder)

        assert await state.lease_acquire(chat_id=chat_id, task_id=alive) == 0
        assert await _queue(chat_id) == []
    finally:
        for task_id in (holder, dead, alive):
            await state.lease_release(chat_id=chat_id, task_id=task_id)


async def test_releasing_anothers_lease_keeps_it_and_only_leaves_the_queue() -> None:
    chat_id = new_id()
    holder, waiter = new_id(), new_id()
    try:
        await state.lease_acquire(chat_id=chat_id, task_id=holder)
        await state.lease_acquire(chat_id=chat_id, task_id=waiter)
        await state.lease_release(chat_id=chat_id, task_id=waiter)

        assert await state.lease_holder(chat_id) == holder
        assert await _queue(chat_id) == []
    finally:
        await state.lease_release(chat_id=chat_id, task_id=holder)


async def test_renewing_extends_only_leases_the_task_still_holds(settings: Any) -> None:
    settings.PIPELINE_LEASE_TTL_S = 2.0
    held, lost = new_id(), new_id()
    chat_held, chat_lost = new_id(), new_id()
    client = state.redis_client()
    try:
        await state.lease_acquire(chat_id=chat_held, task_id=held)
        await client.set(state._lease_key(chat_lost), "someone-else", px=500)
        await client.pexpire(state._lease_key(chat_held), 500)
        await state.leases_renew([(chat_held, held), (chat_lost, lost)])

        assert 1500 < await client.pttl(state._lease_key(chat_held)) <= 2000
        assert await client.pttl(state._lease_key(chat_lost)) <= 500
        assert await state.lease_holder(chat_lost) == "someone-else"
        with round_trips() as count:
            await state.leases_renew([])
        assert count[0] == 0
    finally:
        await state.lease_release(chat_id=chat_held, task_id=held)
        await client.delete(state._lease_key(chat_lost))


# --- records and proof of life -----------------------------------------------------------


async def test_a_record_is_indexed_by_user_and_as_running_until_deleted() -> None:
    record = task_record(user_id=f"u{new_id()}")
    await state.record_save(record)
    try:
        assert await state.record_get(record.task_id) == record
        assert await state.user_records(record.user_id) == [record]
        assert record.task_id in await state.running_task_ids()
        assert 0 < await state.redis_client().ttl(state._record_key(record.task_id)) <= 86400
        running = dataclasses.replace(record, state="running")
        await state.record_save(running)
        assert await state.record_get(record.task_id) == running
    finally:
        await state.record_delete(record)

    assert await state.record_get(record.task_id) is None
    assert await state.user_records(record.user_id) == []
    assert record.task_id not in await state.running_task_ids()


async def test_a_record_gives_its_task_active_entry() -> None:
    record = task_record()
    assert record.active_entry(5) == {
        "chat_id": record.chat_id,
        "task_id": record.task_id,
        "message_id": record.message_id,
        "assistant_message_id": record.assistant_message_id,
        "last_sequence": 5,
    }


async def test_proof_of_life_lasts_the_alive_ttl(settings: Any) -> None:
    settings.PIPELINE_ALIVE_TTL_S = 1.0
    record, waiter = task_record(), task_record()
    try:
        await state.alive_refresh([record.task_id])
        await state.waiter_keep_alive(waiter.task_id)
        assert await state.is_alive(record)
        assert await state.is_alive(waiter)
        await asyncio.sleep(1.1)
        assert not await state.is_alive(record)
        assert not await state.is_alive(waiter)
    finally:
        await forget_turn(record)
        await forget_turn(waiter)


async def test_one_reaper_claims_a_task_and_a_forgotten_task_leaves_the_worklist() -> None:
    record = task_record()
    await state.record_save(record)
    try:
        claims = await asyncio.gather(
            *(state.record_claim_for_reaping(record.task_id) for _ in "abc")
        )
        assert sorted(claims) == [False, False, True]
        await state.running_forget(record.task_id)
        assert record.task_id not in await state.running_task_ids()
    finally:
        await state.record_delete(record)
        await state.redis_client().delete(f"{state.PREFIX}turn:{record.task_id}:reaping")


# --- cancel flags and deleted chats ------------------------------------------------------


async def test_cancels_due_are_the_flagged_turns_and_those_of_deleted_chats(
    cache_user_id: int,
) -> None:
    flagged, deleted, plain = task_record(), task_record(), task_record()
    await state.cancel_flag_set(flagged.task_id)
    await chat_cache.achat_forget(user_id=cache_user_id, chat_id=deleted.chat_id)
    turns = [(r.task_id, r.chat_id) for r in (flagged, deleted, plain)]
    try:
        assert await state.cancels_due(turns) == {flagged.task_id, deleted.task_id}
        assert await state.cancel_flags([r.task_id for r in (flagged, plain)]) == {flagged.task_id}
        assert await state.chat_deleted(deleted.chat_id)
        assert not await state.chat_deleted(plain.chat_id)
        assert await state.cancels_due([]) == set()
        assert await state.cancel_flags([]) == set()
    finally:
        await state.redis_client().delete(state._cancel_key(flagged.task_id))


# --- snapshots ---------------------------------------------------------------------------


def _snapshot(chat_id: str, **changes: Any) -> state.Snapshot:
    base = state.Snapshot(
        chat_id=chat_id,
        message_id=new_id(),
        sequence=3,
        content="Grüße 👋",
        status="done",
        model="scripted/standard",
        usage={"prompt_tokens": 9, "completion_tokens": 3},
    )
    return dataclasses.replace(base, **changes)


async def test_a_snapshot_is_sealed_for_its_user_and_read_back_whole(
    cache_user_id: int, other_user_id: int
) -> None:
    task_id, snapshot = new_id(), _snapshot(new_id())
    await state.snapshot_save(user_id=cache_user_id, task_id=task_id, snapshot=snapshot)
    try:
        sealed = await state.redis_client().get(state._snapshot_key(task_id))
        assert sealed is not None
        assert "Grüße".encode() not in state._bytes(sealed)
        assert await state.snapshot_load(user_id=cache_user_id, task_id=task_id) == snapshot
        with pytest.raises(DecryptionError):
            await state.snapshot_load(user_id=other_user_id, task_id=task_id)
        running = _snapshot(snapshot.chat_id, status=None, model="", usage=None)
        await state.snapshots_save([(cache_user_id, task_id, running)])
        assert await state.snapshot_load(user_id=cache_user_id, task_id=task_id) == running
    finally:
        await state.snapshot_drop(task_id)
    assert await state.snapshot_load(user_id=cache_user_id, task_id=task_id) is None


async def test_no_snapshot_is_stored_for_a_deleted_chat(cache_user_id: int) -> None:
    kept, dropped = new_id(), new_id()
    deleted_chat = new_id()
    await chat_cache.achat_forget(user_id=cache_user_id, chat_id=deleted_chat)
    await state.snapshots_save(
        [
            (cache_user_id, kept, _snapshot(new_id())),
            (cache_user_id, dropped, _snapshot(deleted_chat)),
        ]
    )
    try:
        assert await state.snapshot_load(user_id=cache_user_id, task_id=kept) is not None
        assert await state.snapshot_load(user_id=cache_user_id, task_id=dropped) is None
    finally:
        await state.snapshot_drop(kept)


# --- per-chat state ----------------------------------------------------------------------


async def test_kept_user_text_opens_for_its_user_only_until_dropped(
    cache_user_id: int, other_user_id: int
) -> None:
    message_id = new_id()
    await state.pending_content_save(user_id=cache_user_id, message_id=message_id, content="Hæ?")
    try:
        assert (
            await state.pending_content_load(user_id=cache_user_id, message_id=message_id) == "Hæ?"
        )
        assert (
            await state.pending_content_load(user_id=other_user_id, message_id=message_id) is None
        )
        ttl = await state.redis_client().ttl(chat_cache.pending_text_key(message_id))
        assert state.CHAT_META_TTL_S - 5 < ttl <= state.CHAT_META_TTL_S
    finally:
        await state.pending_content_drop(message_id)
    assert await state.pending_content_load(user_id=cache_user_id, message_id=message_id) is None


async def test_a_chats_notes_are_replaced_whole_and_empty_when_there_are_none(
    cache_user_id: int, other_user_id: int
) -> None:
    chat_id = new_id()
    empty = state.ChatNotes()
    assert await state.chat_notes_load(user_id=cache_user_id, chat_id=chat_id) == empty
    notes = state.ChatNotes(title="Tides", summary="About the sea.", summary_covers="m1")
    await state.chat_notes_save(user_id=cache_user_id, chat_id=chat_id, notes=notes)
    later = dataclasses.replace(notes, summary_covers=None, language="de")
    await state.chat_notes_save(user_id=cache_user_id, chat_id=chat_id, notes=later)
    try:
        assert await state.chat_notes_load(user_id=cache_user_id, chat_id=chat_id) == later
        assert await state.chat_notes_load(user_id=other_user_id, chat_id=chat_id) == empty
        ttl = await state.redis_client().ttl(chat_cache.chat_notes_key(chat_id))
        assert state.CHAT_META_TTL_S - 5 < ttl <= state.CHAT_META_TTL_S
    finally:
        await state.redis_client().delete(chat_cache.chat_notes_key(chat_id))


async def test_a_history_request_is_read_in_place_and_consumed_once() -> None:
    request_id, chat_id, task_id = new_id(), new_id(), new_id()
    await state.history_request_save(
        request_id=request_id, user_id=42, chat_id=chat_id, task_id=task_id
    )
    waiting = {"user_id": "42", "chat_id": chat_id, "task_id": task_id}

    assert await state.history_request_get(request_id) == waiting
    assert await state.history_request_get(request_id) == waiting
    ttl = await state.redis_client().ttl(f"{state.PREFIX}histreq:{request_id}")
    assert 0 < ttl <= state.HISTORY_REQUEST_TTL_S
    assert await state.history_request_pop(request_id) == waiting
    assert await state.history_request_pop(request_id) is None
    assert await state.history_request_get(request_id) is None


async def test_memory_consent_answers_add_up_per_category() -> None:
    chat_id = new_id()
    try:
        assert await state.memory_consent_get(chat_id) == {}
        await state.memory_consent_mark(chat_id, {"health": "asked", "work": "allowed"})
        await state.memory_consent_mark(chat_id, {"health": "denied"})
        await state.memory_consent_mark(chat_id, {})
        assert await state.memory_consent_get(chat_id) == {"health": "denied", "work": "allowed"}
    finally:
        await state.redis_client().delete(state._consent_key(chat_id))


async def test_the_rate_limit_refuses_past_the_limit_within_one_window() -> None:
    user_id = f"u{new_id()}"
    hits = [
        await state.rate_limit_hit(user_id=user_id, kind="turn", limit=2, window_s=60)
        for _ in range(4)
    ]
    other_kind = await state.rate_limit_hit(user_id=user_id, kind="frame", limit=2, window_s=60)

    assert hits == [False, False, True, True]
    assert other_kind is False


async def test_the_turn_limit_is_counted_with_the_frame_limit_only_while_frames_pass() -> None:
    user_id = f"u{new_id()}"
    frames = state.RateLimit("frames", 2, 10)
    turns = state.RateLimit("turns", 1, 60)
    await state.redis_client().ping()  # the connection is made outside the count
    with round_trips() as count:
        first = await state.rate_limits_hit(user_id=user_id, limits=[frames, turns])
    assert (first, count[0]) == (None, 1)
    assert await state.rate_limits_hit(user_id=user_id, limits=[frames, turns]) == turns
    assert await state.rate_limits_hit(user_id=user_id, limits=[frames, turns]) == frames
    # The refused frame above did not count as a turn: the turn counter stayed at 2.
    window = int(time.time() // 60)
    counted = await state.redis_client().get(f"{state.PREFIX}rl:{user_id}:turns:{window}")
    assert counted in (b"2", "2")
    assert await state.rate_limits_hit(user_id=user_id, limits=[]) is None


async def test_an_ended_turn_is_forgotten_in_one_round_trip_naming_a_deleted_chat(
    cache_user_id: int,
) -> None:
    plain, deleted = task_record(), task_record()
    await chat_cache.achat_forget(user_id=cache_user_id, chat_id=deleted.chat_id)
    for record in (plain, deleted):
        assert await state.lease_acquire_recorded(record) == 0
    with round_trips() as count:
        gone = [await state.turn_forget(record) for record in (plain, deleted)]
    assert (gone, count[0]) == ([False, True], 2)
    for record in (plain, deleted):
        assert await state.record_get(record.task_id) is None
        assert await state.lease_holder(record.chat_id) is None
        assert record.task_id not in await state.running_task_ids()
