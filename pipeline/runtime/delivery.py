"""Delivery of one turn's frames (docs/architecture.md §5): numbering and coalescing the
model's text, frames to the sockets of this process and, in batches, of other processes,
snapshots and resume.

A :class:`Delivery` belongs to one turn; the registry feeds it the turn's events
(:meth:`Delivery.add_text` for model text, :meth:`Delivery.emit` for every other frame,
:meth:`Delivery.finish` for ``stream.done``). Model text is coalesced into at most one
``stream.delta`` per :data:`COALESCE_S`, cut into frame-sized pieces
(``events.delta_pieces``) and numbered once, so every socket sees the same sequence.
Every frame goes straight to the local subscribers and into one buffer per remote
subscriber (a channel-layer channel), sent as one ``turn.frames`` message per subscriber
every :data:`FANOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from channels.layers import get_channel_layer

from pipeline import events as ev
from pipeline import state

logger = logging.getLogger(__name__)

COALESCE_S = 0.030
FANOUT_S = 0.050

Frame = dict[str, Any]
# Runs a coroutine in the background, held by the registry until it ends.
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class Subscriber(Protocol):
    """A socket in this process that receives a turn's frames in order."""

    channel_name: str

    async def deliver(self, frame: dict[str, Any]) -> None:
        """Send one frame to the client (must not raise for a closed socket)."""


@dataclass(frozen=True, slots=True)
class StreamDoneInfo:
    """How an ended turn ended, as its snapshot keeps it (``usage``: token counts;
    ``reason``: a failed answer's reason code, docs/protocol.md §8)."""

    status: str
    model: str
    usage: dict[str, int]
    reason: str | None = None


class Delivery:
    """One turn's frames and subscribers.

    ``sequence`` is the number of the last ``stream.delta`` sent; ``parts`` their texts
    (deltas 1..``sequence``); ``pending`` text not yet numbered; ``lifecycle`` every other
    frame sent so far (what a socket that follows the turn late gets first); ``local``
    this process's sockets; ``remote`` a frame buffer per subscriber channel of another
    process. ``spawn`` runs the timed flushes and fan-outs in the background.
    """

    def __init__(self, record: state.TaskRecord, spawn: Spawn) -> None:
        self.user_id = record.user_id
        self.chat_id = record.chat_id
        self.task_id = record.task_id
        self.message_id = record.assistant_message_id
        self._spawn = spawn
        self.sequence = 0
        self.parts: list[str] = []
        self.pending: list[str] = []
        self.last_emit = 0.0
        self.lifecycle: list[Frame] = []
        self.local: list[Subscriber] = []
        self.remote: dict[str, list[Frame]] = {}
        # Held while frames go out: a catch-up and a live frame never interleave.
        self.lock = asyncio.Lock()
        self.flush_handle: asyncio.TimerHandle | None = None
        self.fanout_handle: asyncio.TimerHandle | None = None
        self.snapshot_dirty = False
        self.done: StreamDoneInfo | None = None

    @property
    def content(self) -> str:
        """The text numbered so far (deltas 1..``sequence`` joined)."""
        return "".join(self.parts)

    # --- the turn's frames ---------------------------------------------------------------

    async def add_text(self, text: str) -> None:
        """Queue model text: sent now when the last delta is ``COALESCE_S`` old, else when
        it will be (one timer at a time)."""
        if not text:
            return
        self.pending.append(text)
        wait = self.last_emit + COALESCE_S - time.monotonic()
        if wait <= 0:
            await self.flush_text()
        elif self.flush_handle is None:
            loop = asyncio.get_running_loop()
            self.flush_handle = loop.call_later(wait, self._spawn_flush)

    def _spawn_flush(self) -> None:
        self.flush_handle = None
        self._spawn(self.flush_text())

    async def flush_text(self) -> None:
        """Number the pending text and send it, in frame-sized ``stream.delta`` pieces."""
        async with self.lock:
            if not self.pending:
                return
            text = "".join(self.pending)
            self.pending.clear()
            self.last_emit = time.monotonic()
            self.snapshot_dirty = True
            # Text that arrived faster than it was flushed goes out in frame-sized deltas.
            for piece in ev.delta_pieces(text):
                self.sequence += 1
                self.parts.append(piece)
                frame = ev.StreamDelta(
                    chat_id=self.chat_id,
                    task_id=self.task_id,
                    message_id=self.message_id,
                    sequence=self.sequence,
                    delta=piece,
                ).to_frame()
                await self._deliver(frame)

    async def emit(self, event: ev.ServerEvent) -> None:
        """Send a frame after the pending text and keep it for late followers."""
        await self.flush_text()
        async with self.lock:
            frame = event.to_frame()
            self.lifecycle.append(frame)
            await self._deliver(frame)

    async def finish(self, event: ev.StreamDone) -> ev.StreamDone:
        """Send the turn's ``stream.done`` numbered with its last delta, after storing the
        final snapshot (with the outcome) that late resumes read; returns the event sent."""
        await self.flush_text()
        event = dataclasses.replace(event, sequence=self.sequence)
        self.done = StreamDoneInfo(event.status, event.model, dict(event.usage), event.reason)
        await snapshots_save([self])
        await self.emit(event)
        return event

    async def _deliver(self, frame: Frame) -> None:
        for subscriber in list(self.local):
            await subscriber.deliver(frame)
        if self.remote:
            for buffer in self.remote.values():
                buffer.append(frame)
            if self.fanout_handle is None:
                loop = asyncio.get_running_loop()
                self.fanout_handle = loop.call_later(FANOUT_S, self._spawn_fanout)

    def _spawn_fanout(self) -> None:
        self.fanout_handle = None
        self._spawn(self.fanout())

    async def fanout(self) -> None:
        """Send each remote subscriber its batch (one channel-layer message each)."""
        layer = get_channel_layer()
        assert layer is not None
        for channel, buffer in list(self.remote.items()):
            if not buffer:
                continue
            frames = list(buffer)
            buffer.clear()
            message = {"type": "turn.frames", "task_id": self.task_id, "frames": frames}
            try:
                await layer.send(channel, message)
            except Exception:
                # A full or gone channel: the client sees a gap and sends stream.resume.
                logger.warning("turn %s: batch to %s dropped", self.task_id, channel)

    async def close(self) -> None:
        """The turn ended: its timers stop, its pending text and batches go out now."""
        for handle in (self.flush_handle, self.fanout_handle):
            if handle is not None:
                handle.cancel()
        with contextlib.suppress(Exception):
            await self.flush_text()
            await self.fanout()

    # --- subscribers ---------------------------------------------------------------------

    def subscribe(
        self,
        *,
        local: Subscriber | None = None,
        remote: str | None = None,
        resume: bool,
        history_pending: bool,
    ) -> list[Frame]:
        """Add a subscriber; return the catch-up frames it must get first.

        ``resume``: a ``stream.snapshot`` only (plus the turn's ``request_chat_history``
        while ``history_pending``, the turn still waiting for the history, and, once the
        stream ended, its ``stream.done`` and the frames after it); otherwise (a
        socket following a turn it learnt about from the user's group) the lifecycle
        frames so far, then a snapshot when text already went out. A ``remote``
        subscriber (a channel name) gets its catch-up as its first batch, sent at once.
        """
        catch_up = [] if resume else list(self.lifecycle)
        if resume or self.sequence:
            catch_up.extend(self.snapshot_frames())
        if resume and history_pending:
            # The socket first asked may be gone (a closed tab, a reconnect): ask this one.
            asked = [f for f in self.lifecycle if f["type"] == "request_chat_history"]
            catch_up.extend(asked[-1:])
        if resume:
            # A turn whose stream ended while its post-processing runs: the resuming socket
            # gets the end too (and what followed it), or it would wait for it for ever.
            ended = [i for i, f in enumerate(self.lifecycle) if f["type"] == "stream.done"]
            catch_up.extend(self.lifecycle[ended[0] :] if ended else ())
        if local is not None and local not in self.local:
            self.local.append(local)
        if remote is not None:
            self.remote[remote] = list(catch_up)
            self._spawn(self.fanout())
        return catch_up

    async def follow(self, subscriber: Subscriber, *, resume: bool, history_pending: bool) -> None:
        """Subscribe a local socket and send it its catch-up before any live frame."""
        async with self.lock:
            catch_up = self.subscribe(
                local=subscriber, resume=resume, history_pending=history_pending
            )
            for frame in catch_up:
                await subscriber.deliver(frame)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Forget a socket that closed (locally, and as a remote subscriber's channel)."""
        if subscriber in self.local:
            self.local.remove(subscriber)
        self.remote.pop(subscriber.channel_name, None)

    def snapshot_frames(self) -> list[Frame]:
        """The text numbered so far as ``stream.snapshot`` frames (in parts when long)."""
        # Text not yet numbered stays pending: it goes out as the next delta.
        return ev.StreamSnapshot(
            chat_id=self.chat_id,
            task_id=self.task_id,
            message_id=self.message_id,
            sequence=self.sequence,
            content=self.content,
        ).to_frames()

    def snapshot(self) -> state.Snapshot:
        """What :func:`snapshots_save` stores: the numbered text and, once ended, the outcome."""
        info = self.done
        return state.Snapshot(
            chat_id=self.chat_id,
            message_id=self.message_id,
            sequence=self.sequence,
            content=self.content,
            status=info.status if info else None,
            model=info.model if info else "",
            usage=info.usage if info else None,
            reason=info.reason if info else None,
        )


async def snapshots_save(deliveries: Sequence[Delivery]) -> None:
    """Seal the turns' text so far and store it in one Redis round trip.

    A failure (Vault or Redis away) is logged, not raised: the turn goes on, and a
    resume reads the previous snapshot.
    """
    if not deliveries:
        return
    for delivery in deliveries:
        delivery.snapshot_dirty = False
    try:
        await state.snapshots_save([(d.user_id, d.task_id, d.snapshot()) for d in deliveries])
    except Exception:
        logger.exception("%d turn snapshot(s) not saved", len(deliveries))
