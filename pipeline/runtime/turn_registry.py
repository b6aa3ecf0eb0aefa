"""The turns this process runs (docs/architecture.md §5): start, the chat's lease or
queue, follow, cancel, and the control channel through which other processes reach them.

One :class:`TurnRegistry` per server process (per event loop, and per name so a test can
run two "processes" in one loop; :func:`registry`). A turn runs as an asyncio task held
in ``_tasks`` (a strong reference) inside its own ``ThreadSensitiveContext``, closing its
database connections when it ends; it does not end when the socket that started it
closes. It takes the chat's Redis lease (``pipeline.state``) or waits in the chat's
queue (``task.queued``) until the lease is handed to it. Its frames go out through its
:class:`~pipeline.runtime.delivery.Delivery`; the registry's
:class:`~pipeline.runtime.reaper.Heartbeat` keeps it alive across processes.

Other processes reach a turn through its owner's control channel (the task record's
``owner``): ``turn.subscribe``, ``turn.cancel``, ``turn.history``, ``skill.cancel``.
New turns are announced to the user's group (``user.<id>``) so the user's other sockets
subscribe: a queued turn when it queues, a running one after its first delta (or a frame
asking the user something, or its end).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections

from accounts.services import user_socket_group
from chats import cache as chat_cache
from pipeline import events as ev
from pipeline import state
from pipeline.protocol import ErrorCode
from pipeline.runtime.delivery import Delivery, Subscriber
from pipeline.runtime.reaper import Heartbeat, orphan_fail

logger = logging.getLogger(__name__)

QUEUE_POLL_S = 0.05
# Frames any socket of the user may answer: a turn sending one is announced then.
_ASKS_THE_USER = (ev.RequestChatHistory, ev.MemoryRequest)


def user_group(user_id: int | str) -> str:
    """The channel-layer group of every socket of one user (the accounts app's name)."""
    return user_socket_group(user_id)


@dataclass
class TurnControl:
    """What a running turn shares with the registry (cancel, history arrival, tools)."""

    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    history: asyncio.Event = field(default_factory=asyncio.Event)
    # Set by run_turn once it writes the outcome: a cancel arriving later is too late.
    finishing: bool = False
    # Set by the registry when the turn waited in its chat's queue before it ran.
    queued: bool = False
    tool_tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    cancelled_tools: set[str] = field(default_factory=set)


TurnFactory = Callable[[TurnControl], AsyncGenerator[ev.ServerEvent, None]]


@dataclass(eq=False)
class ActiveTurn:
    """One turn owned by this process: its record, its events' source, its delivery."""

    record: state.TaskRecord
    factory: TurnFactory
    delivery: Delivery
    control: TurnControl = field(default_factory=TurnControl)
    # From stream.done on: no cancel, no snapshot from the heartbeat (the final one is saved).
    finishing: bool = False
    lease_held: bool = False
    # Not yet announced to the user's group: that waits for its first delta (see _run).
    announce_due: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def sequence(self) -> int:
        """The number of the turn's last ``stream.delta`` so far."""
        return self.delivery.sequence


class TurnRegistry:
    """This process's turns, its control channel and its heartbeat."""

    def __init__(self) -> None:
        self.channel: str = ""
        self.turns: dict[str, ActiveTurn] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._started = asyncio.Lock()
        self._heartbeat = Heartbeat(self.turns, self.cancel)

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
                    asyncio.create_task(self._heartbeat.run(), name="turns-heartbeat"),
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

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- a turn's life ----------------------------------------------------------------

    async def start(
        self, *, record: state.TaskRecord, factory: TurnFactory, origin: Subscriber | None
    ) -> ActiveTurn:
        """Run a turn in the background; ``origin`` gets its frames directly."""
        await self.ensure_started()
        turn = ActiveTurn(record=record, factory=factory, delivery=Delivery(record, self._spawn))
        if origin is not None:
            turn.delivery.local.append(origin)
        self.turns[record.task_id] = turn
        task = asyncio.create_task(self._run_in_context(turn), name=f"turn-{record.task_id}")
        turn.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn

    async def _run_in_context(self, turn: ActiveTurn) -> None:
        # Its own ThreadSensitiveContext: this turn's ORM calls get their own thread, not
        # the one every socket of the process shares (docs/architecture.md §5).
        context = ThreadSensitiveContext()
        async with context:
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
                    await _thread_connections_close(context)

    async def _run(self, turn: ActiveTurn) -> None:
        record = turn.record
        # One round trip: the lease (or a place in the queue) and the record saying which.
        position = await state.lease_acquire_recorded(record)
        if position:
            await self._announce(record)
            await turn.delivery.emit(
                ev.TaskQueued(
                    chat_id=record.chat_id,
                    message_id=record.message_id,
                    task_id=record.task_id,
                    position=position,
                ),
            )
            turn.control.queued = True
            turn.lease_held = await self._wait_for_lease(turn)
        else:
            turn.lease_held = True
        turn.record = dataclasses.replace(record, state="running")
        if position:
            await state.record_save(turn.record)
        else:
            # Other sockets catch up when they subscribe, so the announcement waits
            # until the turn's first delta went out (a group send is several Redis
            # calls, which would compete with the turn's start).
            turn.announce_due = True
        await turn.delivery.emit(
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
        delivery = turn.delivery
        if delivery.done is not None:
            return
        record = turn.record
        with contextlib.suppress(Exception):
            await orphan_fail(record)
        with contextlib.suppress(Exception):
            await delivery.emit(
                ev.Error(
                    code=ErrorCode.INTERNAL,
                    message="The turn could not run; try again.",
                    chat_id=record.chat_id,
                    task_id=record.task_id,
                ),
            )
            # Through finish: the snapshot says failed, so a late stream.resume ends too.
            await delivery.finish(
                ev.StreamDone(
                    chat_id=record.chat_id,
                    task_id=record.task_id,
                    message_id=record.assistant_message_id,
                    content=delivery.content,
                    model="",
                    usage={"prompt_tokens": 0, "completion_tokens": 0},
                    status="failed",
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
            await turn.delivery.add_text(event.text)
        elif isinstance(event, ev.StreamDone):
            self._announce_due(turn)
            turn.finishing = True
            done = await turn.delivery.finish(event)
            await self._release(turn)
            if done.status == "cancelled":
                await turn.delivery.emit(
                    ev.TaskCancelled(chat_id=done.chat_id, task_id=done.task_id)
                )
        else:
            await turn.delivery.emit(event)
        if turn.delivery.sequence or isinstance(event, _ASKS_THE_USER):
            self._announce_due(turn)

    def _announce_due(self, turn: ActiveTurn) -> None:
        """Announce the turn in the background once (see ``_run``)."""
        if turn.announce_due:
            turn.announce_due = False
            self._spawn(self._announce(turn.record))

    async def _release(self, turn: ActiveTurn) -> None:
        if turn.lease_held:
            turn.lease_held = False
            await state.lease_release(chat_id=turn.record.chat_id, task_id=turn.record.task_id)

    async def _finish(self, turn: ActiveTurn) -> None:
        await turn.delivery.close()
        try:
            # Also leaves the chat's queue when the turn never got the lease.
            turn.lease_held = False
            if await state.turn_forget(turn.record):
                await _forget_deleted(turn.record)
        except Exception:
            logger.exception("turn %s: could not clean up its Redis state", turn.record.task_id)

    # --- followers ----------------------------------------------------------------------

    def subscribe(
        self,
        task_id: str,
        *,
        local: Subscriber | None = None,
        remote: str | None = None,
        resume: bool,
    ) -> list[dict[str, Any]] | None:
        """Add a subscriber to a local turn; return the catch-up frames it must get first
        (see :meth:`Delivery.subscribe`), or None when the turn is not here."""
        turn = self.turns.get(task_id)
        if turn is None:
            return None
        return turn.delivery.subscribe(
            local=local,
            remote=remote,
            resume=resume,
            history_pending=not turn.control.history.is_set(),
        )

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Forget a local socket (it closed); its turns go on."""
        for turn in self.turns.values():
            turn.delivery.unsubscribe(subscriber)

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
            history_pending = not turn.control.history.is_set()
            await turn.delivery.follow(subscriber, resume=resume, history_pending=history_pending)
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

    async def _announce(self, record: state.TaskRecord) -> None:
        layer = get_channel_layer()
        assert layer is not None
        await layer.group_send(
            user_group(record.user_id),
            {"type": "turn.announce", "task_id": record.task_id, "owner": record.owner},
        )

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


async def _forget_deleted(record: state.TaskRecord) -> None:
    """A turn of a deleted chat leaves nothing of the chat behind.

    Its writes check the deletion mark, but one may have raced the deletion: the chat's
    cache entries, the message's kept text and the snapshot go again.
    """
    await state.snapshot_drop(record.task_id)
    await chat_cache.achat_forget(
        user_id=record.user_id, chat_id=record.chat_id, message_ids=[record.message_id]
    )


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


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


async def _thread_connections_close(context: ThreadSensitiveContext) -> None:
    """Close the database connection of ``context``'s own thread, if it has one.

    asgiref makes a context's thread (a one-worker executor) on the context's first
    thread-sensitive call, and ``__aexit__`` shuts it down from one more new thread. A
    turn's ORM calls go through ``db_call`` instead, so most turns never make that thread:
    closing its connections unconditionally made it, and its shutdown thread, only to
    close nothing (two thread starts on the event loop per turn). Without asgiref's map
    of contexts to threads (a newer asgiref), it closes as before.
    """
    threads = getattr(SyncToAsync, "context_to_thread_executor", None)
    if threads is None or context in threads:
        await sync_to_async(close_old_connections)()
