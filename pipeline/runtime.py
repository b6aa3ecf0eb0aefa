"""The turn runtime (docs/architecture.md §5): background turns, delivery, cancel, resume, reaper.

One :class:`TurnRegistry` per server process (per event loop, and per name so a test can
run two "processes" in one loop). A turn:

* runs as an asyncio task held in ``_tasks`` (a strong reference) inside its own
  ``ThreadSensitiveContext``, closing its database connections when it ends; it does not
  end when the socket that started it closes;
* takes the chat's Redis lease (``pipeline.state``) or waits in the chat's queue
  (``task.queued``), renewed by the registry's heartbeat; an orphan's lease expires and
  :func:`reap_orphans` marks its messages ``failed``;
* consumes ``run_turn``'s events, coalesces ``ReplyDelta`` text into ``stream.delta``
  frames (at most one per ``COALESCE_S``), numbers them once, and delivers every frame
  straight to local subscribers (the socket that sent the message, and any local socket
  that resumed) and in batches through the channel layer to subscribers in other
  processes;
* keeps a sealed snapshot of its text in Redis for ``stream.resume`` after it ended or
  when its process is gone.

Other processes reach a turn through its owner's control channel (the task record's
``owner``): ``turn.subscribe``, ``turn.cancel``, ``turn.history``, ``skill.cancel``.
New turns are announced to the user's group (``user.<id>``) so the user's other sockets
subscribe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections

from accounts.services import user_socket_group
from chats import cache as chat_cache
from pipeline import events as ev
from pipeline import state

logger = logging.getLogger(__name__)

COALESCE_S = 0.030
FANOUT_S = 0.050
HEARTBEAT_S = 0.5
QUEUE_POLL_S = 0.05
REAP_EVERY_S = 10.0


def user_group(user_id: int | str) -> str:
    """The channel-layer group of every socket of one user (the accounts app's name)."""
    return user_socket_group(user_id)


class Subscriber(Protocol):
    """A socket in this process that receives a turn's frames in order."""

    channel_name: str

    async def deliver(self, frame: dict[str, Any]) -> None:
        """Send one frame to the client (must not raise for a closed socket)."""


@dataclass
class TurnControl:
    """What a running turn shares with the registry (cancel, history arrival, tools)."""

    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    history: asyncio.Event = field(default_factory=asyncio.Event)
    # Set by run_turn once it writes the outcome: a cancel arriving later is too late.
    finishing: bool = False
    tool_tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    cancelled_tools: set[str] = field(default_factory=set)


TurnFactory = Callable[[TurnControl], AsyncGenerator[ev.ServerEvent, None]]


@dataclass
class ActiveTurn:
    """One turn owned by this process, with its delivery state."""

    record: state.TaskRecord
    factory: TurnFactory
    control: TurnControl = field(default_factory=TurnControl)
    sequence: int = 0
    parts: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    last_emit: float = 0.0
    lifecycle: list[dict[str, Any]] = field(default_factory=list)
    local: list[Subscriber] = field(default_factory=list)
    remote: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    flush_handle: asyncio.TimerHandle | None = None
    fanout_handle: asyncio.TimerHandle | None = None
    snapshot_dirty: bool = False
    finishing: bool = False
    lease_held: bool = False
    done: StreamDoneInfo | None = None
    task: asyncio.Task[None] | None = None

    def snapshot(self) -> state.Snapshot:
        info = self.done
        return state.Snapshot(
            chat_id=self.record.chat_id,
            message_id=self.record.assistant_message_id,
            sequence=self.sequence,
            content="".join(self.parts),
            status=info.status if info else None,
            model=info.model if info else "",
            usage=info.usage if info else None,
        )


@dataclass(frozen=True, slots=True)
class StreamDoneInfo:
    status: str
    model: str
    usage: dict[str, int]


class TurnRegistry:
    """This process's turns, its control channel and its heartbeat."""

    def __init__(self) -> None:
        self.channel: str = ""
        self.turns: dict[str, ActiveTurn] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._started = asyncio.Lock()
        self._last_reap = 0.0

    # --- start-up ---------------------------------------------------------------------

    async def ensure_started(self) -> str:
        """Open the control channel and start the heartbeat (once); return the channel."""
        async with self._started:
            if not self.channel:
                layer = get_channel_layer()
                assert layer is not None, "CHANNEL_LAYERS is not configured"
                # The default "specific." prefix on purpose: channels-redis has one
                # receive lock per layer, and the coroutine holding it pops only its own
                # channel's process-local list (``<prefix>.<client>!``) until a message
                # comes. A control channel under another prefix would, once it held the
                # lock (after any socket closed), starve every socket of the process.
                self.channel = await layer.new_channel()
                self._loops = [
                    asyncio.create_task(self._receive_loop(), name="turns-control"),
                    asyncio.create_task(self._heartbeat_loop(), name="turns-heartbeat"),
                ]
        return self.channel

    async def stop(self) -> None:
        """Stop the loops and wait for running turns (tests and shutdown)."""
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        receiver, heartbeat = self._loops or (None, None)
        if receiver is not None:
            # Wake the receive loop with a message rather than cancelling a blocked
            # channel-layer receive (channels-redis then waits out its own timeouts).
            layer = get_channel_layer()
            assert layer is not None
            await layer.send(self.channel, {"type": "turn.stop"})
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(receiver, 10)
        if heartbeat is not None:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        self._loops = []
        self.channel = ""

    async def wait_idle(self) -> None:
        """Wait until every turn of this process has ended (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- turns ------------------------------------------------------------------------

    async def start(
        self, *, record: state.TaskRecord, factory: TurnFactory, origin: Subscriber | None
    ) -> ActiveTurn:
        """Run a turn in the background; ``origin`` gets its frames directly."""
        await self.ensure_started()
        turn = ActiveTurn(record=record, factory=factory)
        if origin is not None:
            turn.local.append(origin)
        self.turns[record.task_id] = turn
        task = asyncio.create_task(self._run_in_context(turn), name=f"turn-{record.task_id}")
        turn.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn

    async def _run_in_context(self, turn: ActiveTurn) -> None:
        # Its own ThreadSensitiveContext: this turn's ORM calls get their own thread, not
        # the one every socket of the process shares (docs/architecture.md §5).
        async with ThreadSensitiveContext():
            try:
                await self._run(turn)
            except Exception:
                logger.exception("turn %s crashed", turn.record.task_id)
                await self._fail(turn)
            finally:
                self.turns.pop(turn.record.task_id, None)
                try:
                    await self._finish(turn)
                finally:
                    # Hands this turn thread's connection back to the pool, even when
                    # the clean-up failed (a connection kept by an ended thread is lost).
                    await sync_to_async(close_old_connections)()

    async def _run(self, turn: ActiveTurn) -> None:
        record = turn.record
        # One round trip: the lease (or a place in the queue) and the record saying which.
        position = await state.lease_acquire_recorded(record)
        if position:
            await self._announce(record)
            await self._emit(
                turn,
                ev.TaskQueued(
                    chat_id=record.chat_id,
                    message_id=record.message_id,
                    task_id=record.task_id,
                    position=position,
                ),
            )
            turn.lease_held = await self._wait_for_lease(turn)
        else:
            turn.lease_held = True
        turn.record = state.TaskRecord(**{**_record_fields(record), "state": "running"})
        if position:
            await state.record_save(turn.record)
        if not position:
            # Other sockets catch up when they subscribe: the announcement need not
            # delay this socket's first frames.
            self._spawn(self._announce(turn.record))
        await self._emit(
            turn,
            ev.MessageAccepted(
                chat_id=record.chat_id,
                message_id=record.message_id,
                task_id=record.task_id,
                assistant_message_id=record.assistant_message_id,
            ),
        )
        # A turn cancelled while queued still runs run_turn, which ends it at once.
        await self._consume(turn)

    async def _fail(self, turn: ActiveTurn) -> None:
        """A turn that crashed outside run_turn (Redis gone, …): failed, and said so."""
        if turn.done is not None:
            return
        record = turn.record
        with contextlib.suppress(Exception):
            for handler in _orphan_handlers:
                await handler(record)
        with contextlib.suppress(Exception):
            await self._emit(
                turn,
                ev.Error(
                    code="internal",
                    message="The turn could not run; try again.",
                    chat_id=record.chat_id,
                    task_id=record.task_id,
                ),
            )
            await self._emit(
                turn,
                ev.StreamDone(
                    chat_id=record.chat_id,
                    task_id=record.task_id,
                    message_id=record.assistant_message_id,
                    content="".join(turn.parts),
                    model="",
                    usage={"prompt_tokens": 0, "completion_tokens": 0},
                    status="failed",
                    sequence=turn.sequence,
                ),
            )

    async def _wait_for_lease(self, turn: ActiveTurn) -> bool:
        """Poll for the lease while queued; False when the turn was cancelled meanwhile."""
        record = turn.record
        last_alive = time.monotonic()
        while True:
            if turn.control.cancel.is_set():
                return False
            try:
                await asyncio.sleep(QUEUE_POLL_S)
            except asyncio.CancelledError:
                if turn.control.cancel.is_set():
                    _uncancel()
                    return False
                raise
            if time.monotonic() - last_alive > state.alive_ttl_s() / 3:
                await state.waiter_keep_alive(record.task_id)
                last_alive = time.monotonic()
            if not await state.lease_acquire(chat_id=record.chat_id, task_id=record.task_id):
                return True

    async def _consume(self, turn: ActiveTurn) -> None:
        generator = turn.factory(turn.control)
        async with contextlib.aclosing(generator):
            while True:
                try:
                    event = await generator.__anext__()
                except StopAsyncIteration:
                    break
                except asyncio.CancelledError:
                    # A cancel that landed outside run_turn's own awaits: run_turn sees
                    # the flag between chunks and finishes the turn itself.
                    if turn.control.cancel.is_set():
                        _uncancel()
                        continue
                    raise
                await self._handle(turn, event)

    async def _handle(self, turn: ActiveTurn, event: ev.ServerEvent) -> None:
        if isinstance(event, ev.ReplyDelta):
            await self._add_text(turn, event.text)
            return
        if isinstance(event, ev.StreamDone):
            turn.finishing = True
            await self._flush_text(turn)
            event = dataclasses.replace(event, sequence=turn.sequence)
            turn.done = StreamDoneInfo(event.status, event.model, dict(event.usage))
            await self._save_snapshot(turn)
            await self._emit(turn, event)
            await self._release(turn)
            if event.status == "cancelled":
                await self._emit(
                    turn, ev.TaskCancelled(chat_id=event.chat_id, task_id=event.task_id)
                )
            return
        await self._emit(turn, event)

    async def _release(self, turn: ActiveTurn) -> None:
        if turn.lease_held:
            turn.lease_held = False
            await state.lease_release(chat_id=turn.record.chat_id, task_id=turn.record.task_id)

    async def _finish(self, turn: ActiveTurn) -> None:
        for handle in (turn.flush_handle, turn.fanout_handle):
            if handle is not None:
                handle.cancel()
        with contextlib.suppress(Exception):
            await self._flush_text(turn)
            await self._fanout(turn)
        try:
            # Also leaves the chat's queue when the turn never got the lease.
            turn.lease_held = False
            await state.lease_release(chat_id=turn.record.chat_id, task_id=turn.record.task_id)
            await state.record_delete(turn.record)
            await self._forget_if_deleted(turn)
        except Exception:
            logger.exception("turn %s: could not clean up its Redis state", turn.record.task_id)

    @staticmethod
    async def _forget_if_deleted(turn: ActiveTurn) -> None:
        """A turn of a deleted chat leaves nothing of the chat behind.

        Its writes check the deletion mark, but one may have raced the deletion: the
        chat's cache entries, the message's kept text and the snapshot go again.
        """
        record = turn.record
        if not await state.chat_deleted(record.chat_id):
            return
        await state.snapshot_drop(record.task_id)
        await chat_cache.achat_forget(
            user_id=record.user_id, chat_id=record.chat_id, message_ids=[record.message_id]
        )

    # --- delivery ---------------------------------------------------------------------

    async def _add_text(self, turn: ActiveTurn, text: str) -> None:
        if not text:
            return
        turn.pending.append(text)
        wait = turn.last_emit + COALESCE_S - time.monotonic()
        if wait <= 0:
            await self._flush_text(turn)
        elif turn.flush_handle is None:
            loop = asyncio.get_running_loop()
            turn.flush_handle = loop.call_later(wait, self._spawn_flush, turn)

    def _spawn_flush(self, turn: ActiveTurn) -> None:
        turn.flush_handle = None
        self._spawn(self._flush_text(turn))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush_text(self, turn: ActiveTurn) -> None:
        async with turn.lock:
            if not turn.pending:
                return
            text = "".join(turn.pending)
            turn.pending.clear()
            turn.last_emit = time.monotonic()
            turn.snapshot_dirty = True
            record = turn.record
            # Text that arrived faster than it was flushed goes out in frame-sized deltas.
            for piece in ev.delta_pieces(text):
                turn.sequence += 1
                turn.parts.append(piece)
                frame = ev.StreamDelta(
                    chat_id=record.chat_id,
                    task_id=record.task_id,
                    message_id=record.assistant_message_id,
                    sequence=turn.sequence,
                    delta=piece,
                ).to_frame()
                await self._deliver(turn, frame)

    async def _emit(self, turn: ActiveTurn, event: ev.ServerEvent) -> None:
        await self._flush_text(turn)
        async with turn.lock:
            frame = event.to_frame()
            turn.lifecycle.append(frame)
            await self._deliver(turn, frame)

    async def _deliver(self, turn: ActiveTurn, frame: dict[str, Any]) -> None:
        for subscriber in list(turn.local):
            await subscriber.deliver(frame)
        if turn.remote:
            for buffer in turn.remote.values():
                buffer.append(frame)
            if turn.fanout_handle is None:
                loop = asyncio.get_running_loop()
                turn.fanout_handle = loop.call_later(FANOUT_S, self._spawn_fanout, turn)

    def _spawn_fanout(self, turn: ActiveTurn) -> None:
        turn.fanout_handle = None
        self._spawn(self._fanout(turn))

    async def _fanout(self, turn: ActiveTurn) -> None:
        """Send each remote subscriber its batch (one channel-layer message each)."""
        layer = get_channel_layer()
        assert layer is not None
        for channel, buffer in list(turn.remote.items()):
            if not buffer:
                continue
            frames = list(buffer)
            buffer.clear()
            message = {"type": "turn.frames", "task_id": turn.record.task_id, "frames": frames}
            try:
                await layer.send(channel, message)
            except Exception:
                # A full or gone channel: the client sees a gap and sends stream.resume.
                logger.warning("turn %s: batch to %s dropped", turn.record.task_id, channel)

    def subscribe(
        self,
        task_id: str,
        *,
        local: Subscriber | None = None,
        remote: str | None = None,
        resume: bool,
    ) -> list[dict[str, Any]] | None:
        """Add a subscriber; return the catch-up frames it must get first (None: no turn).

        ``resume``: a ``stream.snapshot`` only (plus the turn's ``request_chat_history``
        while it still waits for the history); otherwise (a socket following a turn it
        learnt about from the user's group) the turn's lifecycle frames so far, then a
        snapshot when text already went out.
        """
        turn = self.turns.get(task_id)
        if turn is None:
            return None
        catch_up = [] if resume else list(turn.lifecycle)
        if resume or turn.sequence:
            catch_up.extend(self._snapshot_frames(turn))
        if resume:
            # A turn still waiting for the chat's history asks the resuming socket again
            # (the socket it first asked may be gone: a closed tab, a reconnect).
            asked = [f for f in turn.lifecycle if f["type"] == "request_chat_history"]
            if asked and not turn.control.history.is_set():
                catch_up.append(asked[-1])
        if local is not None and local not in turn.local:
            turn.local.append(local)
        if remote is not None:
            turn.remote[remote] = list(catch_up)
            self._spawn(self._fanout(turn))
        return catch_up

    @staticmethod
    def _snapshot_frames(turn: ActiveTurn) -> list[dict[str, Any]]:
        # Text not yet numbered stays pending: it goes out as the next delta.
        record = turn.record
        return ev.StreamSnapshot(
            chat_id=record.chat_id,
            task_id=record.task_id,
            message_id=record.assistant_message_id,
            sequence=turn.sequence,
            content="".join(turn.parts),
        ).to_frames()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Forget a local socket (it closed); its turns go on."""
        for turn in self.turns.values():
            if subscriber in turn.local:
                turn.local.remove(subscriber)
            turn.remote.pop(subscriber.channel_name, None)

    async def subscribe_anywhere(
        self, record: state.TaskRecord, subscriber: Subscriber, *, resume: bool
    ) -> bool:
        """Subscribe a local socket to a turn of any process; False when it is not running.

        A local turn delivers its catch-up directly; a remote owner is asked through its
        control channel and answers with a ``turn.frames`` batch.
        """
        if record.owner == self.channel:
            turn = self.turns.get(record.task_id)
            if turn is None:
                return False
            # Under the turn's lock: no live frame can overtake the catch-up.
            async with turn.lock:
                for frame in self.subscribe(record.task_id, local=subscriber, resume=resume) or []:
                    await subscriber.deliver(frame)
            return True
        layer = get_channel_layer()
        assert layer is not None
        await layer.send(
            record.owner,
            {
                "type": "turn.subscribe",
                "task_id": record.task_id,
                "reply": subscriber.channel_name,
                "resume": resume,
            },
        )
        return True

    # --- control ----------------------------------------------------------------------

    def cancel(self, task_id: str) -> bool:
        """Cancel a local turn (queued or running); False when it is not here."""
        turn = self.turns.get(task_id)
        if turn is None:
            return False
        if turn.finishing or turn.control.finishing or turn.control.cancel.is_set():
            return True
        turn.control.cancel.set()
        if turn.task is not None:
            turn.task.cancel()
        return True

    def cancel_tool(self, embed_id: str) -> bool:
        """Cancel one running tool call of a local turn; False when it is not here."""
        for turn in self.turns.values():
            task = turn.control.tool_tasks.get(embed_id)
            if task is not None:
                turn.control.cancelled_tools.add(embed_id)
                task.cancel()
                return True
        return False

    def history_arrived(self, task_id: str) -> bool:
        """Wake a local turn waiting for ``chat.history``."""
        turn = self.turns.get(task_id)
        if turn is None:
            return False
        turn.control.history.set()
        return True

    async def _announce(self, record: state.TaskRecord) -> None:
        layer = get_channel_layer()
        assert layer is not None
        await layer.group_send(
            user_group(record.user_id),
            {"type": "turn.announce", "task_id": record.task_id, "owner": record.owner},
        )

    async def _receive_loop(self) -> None:
        layer = get_channel_layer()
        assert layer is not None
        while True:
            try:
                message = await layer.receive(self.channel)
                if message.get("type") == "turn.stop":
                    return
                await self._on_control(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("turn control message failed")
                await asyncio.sleep(0.1)

    async def _on_control(self, message: dict[str, Any]) -> None:
        kind, task_id = message.get("type"), str(message.get("task_id", ""))
        if kind == "turn.cancel":
            self.cancel(task_id)
        elif kind == "skill.cancel":
            self.cancel_tool(str(message.get("embed_id", "")))
        elif kind == "turn.history":
            self.history_arrived(task_id)
        elif kind == "turn.subscribe":
            reply = str(message["reply"])
            if self.subscribe(task_id, remote=reply, resume=bool(message.get("resume"))) is None:
                await self._answer_ended(task_id, reply)

    async def _answer_ended(self, task_id: str, reply: str) -> None:
        # The turn ended between the subscriber's look-up and now: it reads the snapshot.
        layer = get_channel_layer()
        assert layer is not None
        await layer.send(reply, {"type": "turn.ended", "task_id": task_id})

    async def _heartbeat_loop(self) -> None:
        last_renew = 0.0
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                period = min(state.lease_ttl_s(), state.alive_ttl_s()) / 3
                renew = time.monotonic() - last_renew >= period
                await self._beat(renew=renew)
                if renew:
                    last_renew = time.monotonic()
            except Exception:
                logger.exception("turn heartbeat failed")

    async def _beat(self, *, renew: bool) -> None:
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
        await self._save_snapshots([t for t in turns if t.snapshot_dirty and not t.finishing])
        if time.monotonic() - self._last_reap >= REAP_EVERY_S:
            self._last_reap = time.monotonic()
            await reap_orphans(running_here=set(self.turns))

    async def _save_snapshot(self, turn: ActiveTurn) -> None:
        await self._save_snapshots([turn])

    async def _save_snapshots(self, turns: list[ActiveTurn]) -> None:
        """Seal the turns' text so far and store it in one Redis round trip."""
        if not turns:
            return
        for turn in turns:
            turn.snapshot_dirty = False
        try:
            await state.snapshots_save(
                [(t.record.user_id, t.record.task_id, t.snapshot()) for t in turns]
            )
        except Exception:
            logger.exception("%d turn snapshot(s) not saved", len(turns))


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _record_fields(record: state.TaskRecord) -> dict[str, Any]:
    return {
        "task_id": record.task_id,
        "user_id": record.user_id,
        "chat_id": record.chat_id,
        "message_id": record.message_id,
        "assistant_message_id": record.assistant_message_id,
        "owner": record.owner,
        "state": record.state,
    }


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, TurnRegistry]] = (
    weakref.WeakKeyDictionary()
)


def registry(name: str = "default") -> TurnRegistry:
    """This process's registry for the running event loop (``name`` for tests)."""
    loop = asyncio.get_running_loop()
    by_name = _registries.setdefault(loop, {})
    if name not in by_name:
        by_name[name] = TurnRegistry()
    return by_name[name]


# --- the reaper ----------------------------------------------------------------------


OrphanHandler = Callable[[state.TaskRecord], Any]
_orphan_handlers: list[OrphanHandler] = []


def on_orphan(handler: OrphanHandler) -> OrphanHandler:
    """Register ``async handler(record)`` to run for every reaped task (marks messages)."""
    _orphan_handlers.append(handler)
    return handler


async def reap_orphans(*, running_here: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """End tasks whose process is gone (lease expired, or a queued waiter stopped).

    ``running_here``: task ids the calling process is running; they are never reaped,
    even when a stalled event loop let their proof of life lapse. The reaped tasks'
    messages are marked ``failed`` by the registered handlers and the user's sockets get
    ``stream.done`` with status ``failed``. Returns the reaped task ids.
    """
    reaped: list[str] = []
    layer = get_channel_layer()
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
        for handler in _orphan_handlers:
            try:
                await handler(record)
            except Exception:
                logger.exception("reaper: handler failed for task %s", task_id)
        await state.lease_release(chat_id=record.chat_id, task_id=task_id)
        await state.record_delete(record)
        reaped.append(task_id)
        if layer is not None:
            done = ev.StreamDone(
                chat_id=record.chat_id,
                task_id=task_id,
                message_id=record.assistant_message_id,
                content="",
                model="",
                usage={"prompt_tokens": 0, "completion_tokens": 0},
                status="failed",
            )
            await layer.group_send(
                user_group(record.user_id),
                {"type": "turn.frames", "task_id": task_id, "frames": [done.to_frame()]},
            )
    return reaped
