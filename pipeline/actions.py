"""What each client frame does (the consumer validates, then calls ``dispatch``).

Every function takes the :class:`Socket` that received the frame and the validated frame
model, authorises through the selectors (another user's id is ``not_found``), calls the
services or the turn runtime, and answers through ``socket.deliver``. Problems are raised
as ``FrameError`` with a docs/protocol.md §8 code; the consumer turns them into ``error`` frames.

Every frame but ``ping`` first re-checks the socket's sign-in (``socket.still_signed_in``:
a revoked token or ended session closes the socket instead). A turn starts (or goes on
with a ``chat.history``) only for a current member of the chat's instance: a removed
member keeps reading their chats, but a turn there is ``forbidden``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from chats import cache as chat_cache
from chats import services as chat_services
from chats.models import Chat
from chats.selectors import achat_get_for_user, aembed_chat_id_for_user, auser_message_status
from chats.sync import sync_phases
from instances.models import Instance
from instances.selectors import instance_get_for_user, instance_role_for_user
from openmates import vault
from openmates.crypto import DecryptionError
from pipeline import events as ev
from pipeline import protocol as p
from pipeline import state
from pipeline.db import db_call
from pipeline.ids import new_id
from pipeline.protocol import ErrorCode, FrameError
from pipeline.runtime import TurnControl, TurnRegistry
from pipeline.turn import TurnRequest, run_turn

logger = logging.getLogger(__name__)


class Socket(Protocol):
    """What the actions need from a connected socket."""

    user: Any
    channel_name: str
    registry: TurnRegistry
    following: set[str]

    async def deliver(self, frame: dict[str, Any]) -> None: ...

    async def still_signed_in(self) -> bool: ...


def frames_per_10s() -> int:
    return int(settings.PIPELINE_FRAMES_PER_10S)


def turns_per_minute() -> int:
    return int(settings.PIPELINE_TURNS_PER_MINUTE)


_ERROR_IDS = ("request_id", "chat_id", "task_id", "message_id")


def frame_ids(frame: p.ClientFrame | None) -> dict[str, str]:
    """The ids ``frame`` carries that an ``error`` may name (request, chat, task, message)."""
    found = {name: getattr(frame, name, None) for name in _ERROR_IDS}
    return {name: value for name, value in found.items() if isinstance(value, str) and value}


async def rate_check(socket: Socket, frame: p.ClientFrame | None = None) -> None:
    """Count one frame for the user (all processes); raises ``rate_limited`` over the limit.

    The error names the refused frame's ids (e.g. which ``message.send`` was refused).
    """
    if await state.rate_limit_hit(
        user_id=socket.user.pk, kind="frames", limit=frames_per_10s(), window_s=10
    ):
        raise FrameError(ErrorCode.RATE_LIMITED, "Too many frames; slow down.", **frame_ids(frame))


# Frames answered without acting for the user: no sign-in look-up for them.
_UNCHECKED_FRAMES = frozenset({"ping"})


async def dispatch(socket: Socket, frame: p.ClientFrame) -> None:
    """Run the action of ``frame`` (validated by ``protocol.parse_frame``).

    Nothing runs for a socket whose sign-in no longer holds (it is being closed).
    """
    if frame.type not in _UNCHECKED_FRAMES and not await socket.still_signed_in():
        return
    await rate_check(socket, frame)
    await _ACTIONS[frame.type](socket, frame)


async def _chat_or_not_found(socket: Socket, chat_id: str) -> Chat:
    chat = await achat_get_for_user(chat_id=chat_id, user=socket.user)
    if chat is None:
        raise FrameError(ErrorCode.NOT_FOUND, "No such chat.", chat_id=chat_id)
    return chat


NOT_A_MEMBER = "You are no longer a member of this chat's instance; the chat is read-only."


async def _member_or_forbidden(socket: Socket, chat: Chat, **ids: str) -> None:
    """Raise ``forbidden`` unless the user is a member of ``chat``'s instance now."""
    if await db_call(instance_role_for_user, instance=chat.instance, user=socket.user) is None:
        raise FrameError(ErrorCode.FORBIDDEN, NOT_A_MEMBER, chat_id=chat.pk, **ids)


# --- turns ------------------------------------------------------------------------------

# Users whose transit key this process has made sure of (one Vault call per user and
# process, not per turn).
_keyed_users: set[int] = set()


async def user_key_ensure(user_id: int) -> None:
    """Make sure the user's transit key ``user-<id>`` exists before a turn of theirs.

    Users made by ``createsuperuser`` or ``create_user`` never went through the
    browser's key set-up (which creates the key), yet a turn seals its AI cache,
    snapshots and kept copies under it; the key only protects those server-side copies,
    so the server may create it. This never resurrects a deleted account's key:
    ``account_delete`` shreds the key and deletes the user row with its chats in one
    call, so a turn (which needs the chat, looked up just before this) cannot be
    accepted for an account that is gone. Best effort: a Vault that cannot create keys
    (no admin token, an outage) is logged, and the turn then reports the missing key
    itself if it really is missing.
    """
    if user_id in _keyed_users:
        return
    try:
        await vault.aensure_key(vault.user_key_name(user_id))
    except vault.VaultError as exc:
        logger.warning("transit key of user %s not ensured: %s", user_id, exc)
        if exc.is_outage:
            return  # try again with the next turn
    _keyed_users.add(user_id)


def _not_retryable(chat_id: str, message_id: str, status: str) -> FrameError:
    return FrameError(
        ErrorCode.CONFLICT,
        f"The message is {status}; only a failed, interrupted or cancelled turn can be retried.",
        chat_id=chat_id,
        message_id=message_id,
    )


def _accept(
    *, chat: Chat, user: Any, message_id: str, assistant_message_id: str, retry: bool
) -> tuple[Instance, str, bool]:
    """One sync call: the membership check, then the turn's first write
    (``chats.services.turn_accept``, or ``turn_retry`` for a retry).

    Returns ``(instance, role, started)``; ``started`` is False for a repeated
    ``message.send`` of an id already accepted.

    Raises:
        FrameError: ``forbidden`` when the user is no longer a member of the chat's
            instance (checked here, in the same call that records the messages);
            ``not_found``, ``conflict`` or ``invalid_frame`` for the message id.
    """
    instance = chat.instance  # loaded with the chat (chats.selectors)
    role = instance_role_for_user(instance=instance, user=user)
    if role is None:
        raise FrameError(ErrorCode.FORBIDDEN, NOT_A_MEMBER, chat_id=chat.pk, message_id=message_id)
    if retry:
        _reopen(chat=chat, message_id=message_id, assistant_message_id=assistant_message_id)
        return instance, role, True
    try:
        started = chat_services.turn_accept(
            chat=chat, user=user, message_id=message_id, assistant_message_id=assistant_message_id
        )
    except chat_services.NotFound:
        raise FrameError(ErrorCode.NOT_FOUND, "No such chat.", chat_id=chat.pk) from None
    except chat_services.IdInUse:
        raise FrameError(
            ErrorCode.INVALID_FRAME, "That message id is already in use.", message_id=message_id
        ) from None
    return instance, role, started


def _reopen(*, chat: Chat, message_id: str, assistant_message_id: str) -> None:
    """``chats.services.turn_retry``, its refusals as ``FrameError``."""
    try:
        chat_services.turn_retry(
            chat=chat, message_id=message_id, assistant_message_id=assistant_message_id
        )
    except chat_services.NotFound:
        raise FrameError(ErrorCode.NOT_FOUND, "No such message.", message_id=message_id) from None
    except chat_services.NotRetryable as refused:
        raise _not_retryable(chat.pk, message_id, refused.status) from None
    except chat_services.IdInUse:
        raise FrameError(
            ErrorCode.INVALID_FRAME, "That message id is already in use.", message_id=message_id
        ) from None


async def _retryable_or_raise(chat: Chat, message_id: str) -> None:
    """Refuse a retry early, before its kept text is read (``turn_retry`` checks again
    under the row locks)."""
    status = await auser_message_status(chat_id=chat.pk, message_id=message_id)
    if status is None:
        raise FrameError(ErrorCode.NOT_FOUND, "No such message.", message_id=message_id)
    if status not in chat_services.RETRYABLE_STATUSES:
        raise _not_retryable(chat.pk, message_id, status)


async def _turn_start(
    socket: Socket,
    *,
    chat_id: str,
    message_id: str,
    content: str | None,
    frame: p.MessageSend | None,
) -> None:
    if await state.rate_limit_hit(
        user_id=socket.user.pk, kind="turns", limit=turns_per_minute(), window_s=60
    ):
        raise FrameError(
            ErrorCode.RATE_LIMITED,
            "Too many messages; wait a minute.",
            chat_id=chat_id,
            message_id=message_id,
        )
    chat = await _chat_or_not_found(socket, chat_id)
    await user_key_ensure(socket.user.pk)
    retry = frame is None
    if retry:
        await _retryable_or_raise(chat, message_id)
        content = await state.pending_content_load(user_id=socket.user.pk, message_id=message_id)
        if content is None:
            raise FrameError(
                ErrorCode.NOT_FOUND,
                "The message text is no longer available; send it again.",
                chat_id=chat_id,
                message_id=message_id,
            )
    assistant_message_id = new_id()
    instance, role, started = await db_call(
        _accept,
        chat=chat,
        user=socket.user,
        message_id=message_id,
        assistant_message_id=assistant_message_id,
        retry=retry,
    )
    if not started:
        await _duplicate(socket, chat_id=chat_id, message_id=message_id)
        return
    await _turn_launch(
        socket,
        TurnRequest(
            task_id=new_id(),
            user_id=socket.user.pk,
            chat=chat,
            instance=instance,
            role=role,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            content=str(content),
            **_requested(frame),
        ),
    )


def _requested(frame: p.MessageSend | None) -> dict[str, Any]:
    """What a ``message.send`` asks of its turn (a retry asks nothing)."""
    overrides = frame.overrides if frame is not None else None
    return {
        "client_history": tuple(m.model_dump() for m in frame.history)
        if frame and frame.history
        else None,
        "requested_tier": overrides.tier if overrides else None,
        "requested_tools": tuple(overrides.tools) if overrides and overrides.tools else None,
        "requested_mate": overrides.mate if overrides else None,
    }


async def _turn_launch(socket: Socket, request: TurnRequest) -> None:
    """Run an accepted turn in this process; the socket that sent it follows it."""
    await socket.registry.ensure_started()
    record = state.TaskRecord(
        task_id=request.task_id,
        user_id=str(socket.user.pk),
        chat_id=request.chat.pk,
        message_id=request.message_id,
        assistant_message_id=request.assistant_message_id,
        owner=socket.registry.channel,
        state="queued",
    )

    def factory(control: TurnControl) -> Any:
        return run_turn(request, control)

    socket.following.add(request.task_id)
    await socket.registry.start(record=record, factory=factory, origin=socket)


async def _duplicate(socket: Socket, *, chat_id: str, message_id: str) -> None:
    """A repeated ``message.send``: follow its turn when it runs, else ``conflict``.

    The ``conflict`` names the turn's ``task_id`` while it is still queued or running
    (e.g. its process is another one, or it ended a moment ago), so the client can send
    ``stream.resume``.
    """
    task_id = None
    # This process's own turns first: a turn just started has no record in Redis yet.
    local = [turn.record for turn in socket.registry.turns.values()]
    for record in [*local, *await state.user_records(socket.user.pk)]:
        if (
            record.message_id == message_id
            and record.chat_id == chat_id
            and record.user_id == str(socket.user.pk)
        ):
            task_id = record.task_id
            socket.following.add(record.task_id)
            if await socket.registry.subscribe_anywhere(record, socket, resume=False):
                return
    ids = {"chat_id": chat_id, "message_id": message_id}
    if task_id is not None:
        ids["task_id"] = task_id
    raise FrameError(ErrorCode.CONFLICT, "This message was already accepted.", **ids)


async def message_send(socket: Socket, frame: p.MessageSend) -> None:
    await _turn_start(
        socket,
        chat_id=frame.chat_id,
        message_id=frame.message_id,
        content=frame.content,
        frame=frame,
    )


async def message_retry(socket: Socket, frame: p.MessageRetry) -> None:
    await _turn_start(
        socket, chat_id=frame.chat_id, message_id=frame.message_id, content=None, frame=None
    )


async def _owned_record(socket: Socket, task_id: str) -> state.TaskRecord:
    record = await state.record_get(task_id)
    if record is None or record.user_id != str(socket.user.pk):
        raise FrameError(ErrorCode.NOT_FOUND, "No such running task.", task_id=task_id)
    return record


async def _control_send(socket: Socket, record: state.TaskRecord, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    assert layer is not None
    await layer.send(record.owner, message)


async def _turn_cancel(socket: Socket, record: state.TaskRecord) -> None:
    """Cancel a turn in any process: the Redis flag (its owner's heartbeat reads it) and,
    so it stops at once, the owner itself (this registry or its control channel)."""
    await state.cancel_flag_set(record.task_id)
    if record.owner == socket.registry.channel:
        socket.registry.cancel(record.task_id)
    else:
        await _control_send(socket, record, {"type": "turn.cancel", "task_id": record.task_id})


async def task_cancel(socket: Socket, frame: p.TaskCancel) -> None:
    await _turn_cancel(socket, await _owned_record(socket, frame.task_id))


async def skill_cancel(socket: Socket, frame: p.SkillCancel) -> None:
    chat_id = await aembed_chat_id_for_user(embed_id=frame.embed_id, user_id=socket.user.pk)
    holder = await state.lease_holder(chat_id) if chat_id else None
    record = await state.record_get(holder) if holder else None
    if record is None or record.user_id != str(socket.user.pk):
        raise FrameError(ErrorCode.NOT_FOUND, "No such running tool call.")
    if record.owner == socket.registry.channel:
        socket.registry.cancel_tool(frame.embed_id)
    else:
        await _control_send(socket, record, {"type": "skill.cancel", "embed_id": frame.embed_id})


async def stream_resume(socket: Socket, frame: p.StreamResume) -> None:
    record = await state.record_get(frame.task_id)
    if (
        record is not None
        and record.user_id == str(socket.user.pk)
        and record.chat_id == frame.chat_id
    ):
        socket.following.add(record.task_id)
        if await socket.registry.subscribe_anywhere(record, socket, resume=True):
            return
    await turn_ended(socket, frame.task_id, chat_id=frame.chat_id)


async def turn_ended(socket: Socket, task_id: str, *, chat_id: str | None = None) -> None:
    """Answer a resume from the sealed snapshot of a turn that is no longer running."""
    try:
        snapshot = await state.snapshot_load(user_id=socket.user.pk, task_id=task_id)
    except DecryptionError:
        snapshot = None  # another user's task: its snapshot is not sealed for this user
    if snapshot is None or (chat_id is not None and snapshot.chat_id != chat_id):
        raise FrameError(ErrorCode.NOT_FOUND, "No such task.", task_id=task_id)
    for frame in ev.StreamSnapshot(
        chat_id=snapshot.chat_id,
        task_id=task_id,
        message_id=snapshot.message_id,
        sequence=snapshot.sequence,
        content=snapshot.content,
    ).to_frames():
        await socket.deliver(frame)
    if snapshot.status is not None:
        await socket.deliver(
            ev.StreamDone(
                chat_id=snapshot.chat_id,
                task_id=task_id,
                message_id=snapshot.message_id,
                content=snapshot.content,
                model=snapshot.model,
                usage=snapshot.usage or {"prompt_tokens": 0, "completion_tokens": 0},
                status=snapshot.status,
                sequence=snapshot.sequence,
            ).to_frame()
        )


async def turn_follow(socket: Socket, task_id: str) -> None:
    """A turn of this user started somewhere: follow it unless this socket already does."""
    if task_id in socket.following:
        return
    record = await state.record_get(task_id)
    if record is None:
        # It ended before this socket got to it (a short turn, a busy process): its
        # sealed snapshot gives the text and the outcome; another user's does not open.
        socket.following.add(task_id)
        with contextlib.suppress(FrameError):
            await turn_ended(socket, task_id)
        return
    if record.user_id != str(socket.user.pk):
        return
    socket.following.add(task_id)
    await socket.registry.subscribe_anywhere(record, socket, resume=False)


async def task_active(socket: Socket) -> ev.TaskActive:
    """The user's queued and running turns, for ``task.active`` on connect."""
    entries = []
    for record in await state.user_records(socket.user.pk):
        local = socket.registry.turns.get(record.task_id)
        if local is not None:
            sequence = local.sequence
        else:
            try:
                snapshot = await state.snapshot_load(user_id=socket.user.pk, task_id=record.task_id)
            except DecryptionError:
                snapshot = None
            sequence = snapshot.sequence if snapshot else 0
        entries.append(record.active_entry(sequence))
    return ev.TaskActive(tasks=tuple(entries))


async def chat_history(socket: Socket, frame: p.ChatHistory) -> None:
    """Store a requested history and wake the turn waiting for it.

    The request is consumed only by an answer that passes every check, so a wrong answer
    (another chat, another user, a removed member) leaves it for the right one. A member
    removed meanwhile gets ``forbidden`` and their waiting turn is cancelled.
    """
    not_requested = FrameError(
        ErrorCode.NOT_FOUND,
        "No history was requested with that id.",
        request_id=frame.request_id,
        chat_id=frame.chat_id,
    )
    pending = await state.history_request_get(frame.request_id)
    if (
        pending is None
        or pending["user_id"] != str(socket.user.pk)
        or pending["chat_id"] != frame.chat_id
    ):
        raise not_requested
    # A deleted chat's cache must not come back with a late answer.
    chat = await _chat_or_not_found(socket, frame.chat_id)
    record = await state.record_get(pending["task_id"])
    try:
        await _member_or_forbidden(socket, chat, request_id=frame.request_id)
    except FrameError:
        if record is not None and record.user_id == str(socket.user.pk):
            await _turn_cancel(socket, record)
        raise
    if await state.history_request_pop(frame.request_id) is None:
        raise not_requested  # another socket's answer came first
    await chat_cache.ai_history_store(
        user_id=socket.user.pk,
        chat_id=frame.chat_id,
        messages=[m.model_dump() for m in frame.messages],
    )
    if frame.summary:
        notes = await state.chat_notes_load(user_id=socket.user.pk, chat_id=frame.chat_id)
        # What the client's summary covers is unknown: the next post-processing folds the
        # older messages into it again rather than trusting an old marker.
        notes = replace(notes, summary=frame.summary, summary_covers=None)
        await state.chat_notes_save(user_id=socket.user.pk, chat_id=frame.chat_id, notes=notes)
    if record is None:
        return
    if record.owner == socket.registry.channel:
        socket.registry.history_arrived(record.task_id)
    else:
        await _control_send(socket, record, {"type": "turn.history", "task_id": record.task_id})


async def memory_consent(socket: Socket, frame: p.MemoryConsent) -> None:
    await _chat_or_not_found(socket, frame.chat_id)
    consent = await state.memory_consent_get(frame.chat_id)
    answers = {c: "denied" for c, value in consent.items() if value == "asked"}
    answers.update(dict.fromkeys(frame.allowed, "allowed"))
    await state.memory_consent_mark(frame.chat_id, answers)


# --- chats and messages -----------------------------------------------------------------


async def chat_create(socket: Socket, frame: p.ChatCreate) -> None:
    instance = await sync_to_async(instance_get_for_user)(slug=frame.instance, user=socket.user)
    if instance is None:
        raise FrameError(ErrorCode.NOT_FOUND, "No such instance.", request_id=frame.request_id)
    try:
        chat = await sync_to_async(chat_services.chat_create)(
            user=socket.user,
            chat_id=frame.chat_id,
            instance=instance,
            encrypted_chat_key=frame.encrypted_chat_key,
            encrypted_title=frame.encrypted_title,
        )
    except chat_services.IdInUse:
        raise FrameError(
            ErrorCode.INVALID_FRAME,
            "That chat id is already in use.",
            request_id=frame.request_id,
            chat_id=frame.chat_id,
        ) from None
    await socket.deliver(
        ev.ChatCreated(
            chat_id=chat.pk, version=chat.version, request_id=frame.request_id
        ).to_frame()
    )


# The chat's encrypted metadata (docs/crypto.md §3): every field a client re-encrypts at
# the new meta_version, so none of them is left behind at an older one.
CHAT_META_FIELDS = (
    "encrypted_title",
    "encrypted_summary",
    "encrypted_tags",
    "encrypted_category",
    "encrypted_icon",
)


async def chat_update(socket: Socket, frame: p.ChatUpdate) -> None:
    chat = await _chat_or_not_found(socket, frame.chat_id)
    changes = {
        name: getattr(frame, name) for name in CHAT_META_FIELDS if name in frame.model_fields_set
    }
    try:
        updated = await sync_to_async(chat_services.chat_update)(
            chat=chat, version=frame.version, pinned=frame.pinned, **changes
        )
    except chat_services.VersionConflict as conflict:
        raise FrameError(ErrorCode.CONFLICT, f"{conflict}", chat_id=frame.chat_id) from None
    await socket.deliver(
        ev.ChatUpdated(
            chat_id=updated.pk, version=updated.version, request_id=frame.request_id
        ).to_frame()
    )


async def chat_delete(socket: Socket, frame: p.ChatDelete) -> None:
    chat = await _chat_or_not_found(socket, frame.chat_id)
    await sync_to_async(chat_services.chat_delete)(chat=chat)
    # Its turns stop now, not at their owner's next heartbeat (which also notices).
    await _chat_turns_cancel(socket, frame.chat_id)
    await socket.deliver(
        ev.ChatDeleted(
            chat_id=frame.chat_id, version=chat.version + 1, request_id=frame.request_id
        ).to_frame()
    )


async def _chat_turns_cancel(socket: Socket, chat_id: str) -> None:
    """Cancel the user's queued and running turns of ``chat_id``, in every process."""
    # This process's own turns first: a turn just started has no record in Redis yet.
    local = [turn.record for turn in socket.registry.turns.values()]
    records = {r.task_id: r for r in [*await state.user_records(socket.user.pk), *local]}
    for record in records.values():
        if record.chat_id == chat_id and record.user_id == str(socket.user.pk):
            await _turn_cancel(socket, record)


async def message_store(socket: Socket, frame: p.MessageStore) -> None:
    chat = await _chat_or_not_found(socket, frame.chat_id)
    try:
        message = await sync_to_async(chat_services.message_store)(
            chat=chat,
            message_id=frame.message_id,
            encrypted_content=frame.encrypted_content,
            version=frame.version,
        )
    except chat_services.NotFound:
        raise FrameError(
            ErrorCode.NOT_FOUND,
            "No such message.",
            chat_id=frame.chat_id,
            message_id=frame.message_id,
        ) from None
    except chat_services.VersionConflict as conflict:
        raise FrameError(
            ErrorCode.CONFLICT, f"{conflict}", chat_id=frame.chat_id, message_id=frame.message_id
        ) from None
    await socket.deliver(
        ev.MessageStored(
            chat_id=frame.chat_id, message_id=message.pk, version=message.version
        ).to_frame()
    )


async def sync_request(socket: Socket, frame: p.SyncRequest) -> None:
    phases = await sync_to_async(sync_phases)(user=socket.user, known=dict(frame.known))
    total = 0
    for number, chats in enumerate(phases, start=1):
        total += len(chats)
        for part in ev.SyncPhase(phase=number, chats=tuple(chats)).to_frames():
            await socket.deliver(part)
    await socket.deliver(ev.SyncDone(total_chats=total).to_frame())


async def ping(socket: Socket, frame: p.Ping) -> None:
    await socket.deliver(ev.Pong(ts=frame.ts).to_frame())


_ACTIONS: dict[str, Callable[[Socket, Any], Awaitable[None]]] = {
    "chat.create": chat_create,
    "chat.update": chat_update,
    "chat.delete": chat_delete,
    "message.send": message_send,
    "message.retry": message_retry,
    "message.store": message_store,
    "chat.history": chat_history,
    "memory.consent": memory_consent,
    "task.cancel": task_cancel,
    "skill.cancel": skill_cancel,
    "stream.resume": stream_resume,
    "sync.request": sync_request,
    "ping": ping,
}
