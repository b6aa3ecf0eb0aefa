"""Liveness of turns across processes (docs/architecture.md §5): the heartbeat and the
reaper.

Each registry runs one :class:`Heartbeat`: every :data:`HEARTBEAT_S` it reads the cancel
flags (and chat deletions) of its turns and saves their dirty snapshots; about every
min(lease TTL, alive TTL)/3 it first vouches for its turns (``om:turn:{tid}:alive``) and
renews the leases it holds; every :data:`REAP_EVERY_S` it runs :func:`reap_orphans`,
which ends the turns of processes that are gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from channels.layers import get_channel_layer

from accounts.services import user_socket_group
from pipeline import events as ev
from pipeline import state
from pipeline.runtime.delivery import Delivery, snapshots_save

logger = logging.getLogger(__name__)

HEARTBEAT_S = 0.5
REAP_EVERY_S = 10.0

OrphanHandler = Callable[[state.TaskRecord], Awaitable[Any]]
_orphan_handlers: list[OrphanHandler] = []


def on_orphan(handler: OrphanHandler) -> OrphanHandler:
    """Register ``async handler(record)`` to run for every reaped task (marks messages)."""
    _orphan_handlers.append(handler)
    return handler


async def orphan_fail(record: state.TaskRecord) -> None:
    """Run every registered handler for a task that ended without its outcome; a
    handler that raises is logged and the others still run."""
    for handler in _orphan_handlers:
        try:
            await handler(record)
        except Exception:
            logger.exception("reaper: handler failed for task %s", record.task_id)


async def reap_orphans(*, running_here: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """End tasks whose process is gone (lease expired, or a queued waiter stopped).

    ``running_here``: task ids the calling process is running; they are never reaped,
    even when a stalled event loop let their proof of life lapse. The reaped tasks'
    messages are marked ``failed`` by the registered handlers and the user's sockets get
    ``stream.done`` with status ``failed``. Returns the reaped task ids.
    """
    reaped: list[str] = []
    for task_id in await state.running_task_ids():
        if task_id in running_here:
            continue
        record = await state.record_get(task_id)
        if record is None:
            await state.running_forget(task_id)
            continue
        if await state.is_alive(record):
            continue
        if not await state.record_claim_for_reaping(task_id):
            continue  # another process is reaping it
        await _reap(record)
        reaped.append(task_id)
    return reaped


async def _reap(record: state.TaskRecord) -> None:
    await orphan_fail(record)
    # Before the record goes: a stream.resume from then on reads the snapshot.
    await _snapshot_failed(record)
    await state.lease_release(chat_id=record.chat_id, task_id=record.task_id)
    await state.record_delete(record)
    layer = get_channel_layer()
    if layer is None:
        return
    done = ev.StreamDone(
        chat_id=record.chat_id,
        task_id=record.task_id,
        message_id=record.assistant_message_id,
        content="",
        model="",
        usage={"prompt_tokens": 0, "completion_tokens": 0},
        status="failed",
    )
    await layer.group_send(
        user_socket_group(record.user_id),
        {"type": "turn.frames", "task_id": record.task_id, "frames": [done.to_frame()]},
    )


async def _snapshot_failed(record: state.TaskRecord) -> None:
    """Store the reaped turn's snapshot with status ``failed`` (its text so far kept), so
    a late ``stream.resume`` gets ``stream.done`` instead of a turn that never ends."""
    try:
        kept = await state.snapshot_load(user_id=record.user_id, task_id=record.task_id)
    except Exception:
        # A replaced key or a service away: the text is lost, the outcome is not.
        logger.warning("reaper: snapshot of task %s not readable", record.task_id)
        kept = None
    failed = state.Snapshot(
        chat_id=record.chat_id,
        message_id=record.assistant_message_id,
        sequence=kept.sequence if kept else 0,
        content=kept.content if kept else "",
        status="failed",
    )
    try:
        await state.snapshot_save(user_id=record.user_id, task_id=record.task_id, snapshot=failed)
    except Exception:
        logger.exception("reaper: snapshot of task %s not saved", record.task_id)


class LiveTurn(Protocol):
    """What the heartbeat reads of a turn this process runs."""

    record: state.TaskRecord
    lease_held: bool
    finishing: bool
    delivery: Delivery


class Heartbeat:
    """One process's heartbeat over ``turns`` (task id → turn, the registry's own dict);
    ``cancel(task_id)`` stops a turn whose cancel flag is set or whose chat was deleted."""

    def __init__(self, turns: Mapping[str, LiveTurn], cancel: Callable[[str], object]) -> None:
        self.turns = turns
        self.cancel = cancel
        self.last_reap = 0.0

    async def run(self) -> None:
        """Beat every ``HEARTBEAT_S`` until cancelled; a failed beat is logged."""
        last_renew = 0.0
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                period = min(state.lease_ttl_s(), state.alive_ttl_s()) / 3
                renew = time.monotonic() - last_renew >= period
                await self.beat(renew=renew)
                if renew:
                    last_renew = time.monotonic()
            except Exception:
                logger.exception("turn heartbeat failed")

    async def beat(self, *, renew: bool) -> None:
        """One beat: with ``renew`` the turns' proof of life and leases first, then the
        cancels due, the dirty snapshots and, every ``REAP_EVERY_S``, the reaper."""
        turns = list(self.turns.values())
        if renew:
            # Proof of life first: saving snapshots under load can take a while, and a
            # late refresh would let the reaper (here or elsewhere) end live turns.
            await state.alive_refresh([t.record.task_id for t in turns])
            await state.leases_renew(
                [(t.record.chat_id, t.record.task_id) for t in turns if t.lease_held]
            )
        # A cancel flag or the chat's deletion, set by any process.
        due = await state.cancels_due([(t.record.task_id, t.record.chat_id) for t in turns])
        for task_id in due:
            self.cancel(task_id)
        dirty = [t.delivery for t in turns if t.delivery.snapshot_dirty and not t.finishing]
        await snapshots_save(dirty)
        if time.monotonic() - self.last_reap >= REAP_EVERY_S:
            self.last_reap = time.monotonic()
            await reap_orphans(running_here=set(self.turns))
