"""What each client frame does (the consumer validates, then calls ``dispatch``).

Every function takes the :class:`Socket` that received the frame and the validated frame
model, authorises through the selectors (another user's id is ``not_found``), calls the
services or the turn runtime, and answers through ``socket.deliver``. Problems are raised
as ``FrameError`` with a docs/protocol.md §8 code; the consumer turns them into ``error`` frames.

Every frame but ``ping`` first re-checks the socket's sign-in (``socket.still_signed_in``:
a revoked token or ended session closes the socket instead). A turn starts (or goes on
with a ``chat.history``) only for a current member of the chat's instance: a removed
member keeps reading their chats, but a turn there is ``forbidden``. A server-managed chat
(``/v1``, a channel) is ``read_only`` here: no turn, no ``message.store``, no encrypted
metadata (pinning and deleting it are taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction

from chats import cache as chat_cache
from chats import services as chat_services
from chats.models import Chat, ChatMode
from chats.selectors import (
    NO_BRANCH,
    Branch,
    TurnChat,
    achat_get_for_user,
    aembed_chat_id_for_user,
    auser_message_status,
    message_branch,
    turn_chat_get,
)
from chats.sync import chats_gone, sync_phases
from instances.selectors import (
    instance_get_for_user,
    instance_role_for_user,
    mates_for_instance,
)
from openmates import crypto, llm, vault
from openmates.crypto import DecryptionError
from openmates.sockets import auser_sockets_send
from pipeline import events as ev
from pipeline import files as turn_files
from pipeline import protocol as p
from pipeline import speculate, state
from pipeline.db import db_call
from pipeline.ids import new_id
from pipeline.prompts import answer_reserve_tokens
from pipeline.protocol import ErrorCode, FrameError
from pipeline.runtime import TurnControl, TurnRegistry
from pipeline.turn import EarlyReads, TurnRequest, early_reads_drop, early_reads_start, run_turn

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


# Frames that start a turn count against the per-minute turn limit as well.
_TURN_FRAMES = frozenset({"message.send", "message.retry", "message.regenerate"})


def _limits_for(frame: p.ClientFrame | None) -> list[state.RateLimit]:
    limits = [state.RateLimit("frames", frames_per_10s(), 10)]
    if frame is not None and frame.type in _TURN_FRAMES:
        limits.append(state.RateLimit("turns", turns_per_minute(), 60))
    return limits


async def rate_check(socket: Socket, frame: p.ClientFrame | None = None) -> None:
    """Count one frame for the user (all processes), and one turn for a frame that
    starts one, in one Redis round trip; raises ``rate_limited`` over either limit (a
    frame refused by the frame limit is not counted as a turn).

    The error names the refused frame's ids (e.g. which ``message.send`` was refused) and
    ``retry_after``, the whole seconds until the limit's fixed window ends (at least 1).
    """
    hit = await state.rate_limits_hit(user_id=socket.user.pk, limits=_limits_for(frame))
    if hit is None:
        return
    text = "Too many messages; wait a minute." if hit.kind == "turns" else None
    refused = FrameError(
        ErrorCode.RATE_LIMITED, text or "Too many frames; slow down.", **frame_ids(frame)
    )
    # The windows are fixed (state.rate_limits_hit): the limit frees when this one ends.
    refused.retry_after = max(1, math.ceil(hit.window_s - time.time() % hit.window_s))
    raise refused


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


def _read_only(**ids: str) -> FrameError:
    """The ``read_only`` error of a client write or turn in a server-managed chat."""
    return FrameError(ErrorCode.READ_ONLY, chat_services.SERVER_MANAGED_READ_ONLY, **ids)


async def _member_or_forbidden(socket: Socket, chat: Chat, **ids: str) -> None:
    """Raise ``forbidden`` unless the user is a member of ``chat``'s instance now."""
    if await db_call(instance_role_for_user, instance=chat.instance, user=socket.user) is None:
        raise FrameError(ErrorCode.FORBIDDEN, NOT_A_MEMBER, chat_id=chat.pk, **ids)


# --- turns ------------------------------------------------------------------------------

# Users whose transit key this process has made sure of (one Vault call per user and
# process, not per turn), and the data-key warm-ups of sockets that just connected.
_keyed_users: set[int] = set()
_warmups: dict[int, asyncio.Future[None]] = {}


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
    itself if it really is missing. A warm-up of the user's socket still running
    (:func:`user_key_warm`) is waited for: when it found the key, no call is made.
    """
    if user_id in _keyed_users:
        return
    warming = _warmups.get(user_id)
    if warming is not None and warming.get_loop() is asyncio.get_running_loop():
        await asyncio.shield(warming)
        if user_id in _keyed_users:
            return
    try:
        await vault.aensure_key(vault.user_key_name(user_id))
    except vault.VaultError as exc:
        logger.warning("transit key of user %s not ensured: %s", user_id, exc)
        if exc.is_outage:
            return  # try again with the next turn
    _keyed_users.add(user_id)


def user_key_warm(user_id: int) -> None:
    """Warm the user's turn data keys (:data:`TURN_PURPOSES`) in the background, for a
    socket that just connected: its first turn then seals without a Vault call.

    Never creates the transit key (a socket of an account being deleted must not bring
    it back): it only uses an existing one, and its success proves that the key exists,
    so :func:`user_key_ensure` makes no call either. Failures (no key yet, Vault away)
    are logged; the turn then does what it would have done without the warm-up.
    """
    if user_id in _keyed_users or user_id in _warmups:
        return
    warming = asyncio.ensure_future(_data_key_warm(user_id))
    _warmups[user_id] = warming

    def forget(done: asyncio.Future[None]) -> None:
        if _warmups.get(user_id) is done:
            del _warmups[user_id]

    warming.add_done_callback(forget)


# What a turn seals under: its snapshots and AI cache entries, and at its end the
# reply's sealed server copy (chats.services.turn_finish). A cold one is a Vault call in
# the turn; 200 users starting a turn at once made 200 of them (bench/turn_overhead.py).
TURN_PURPOSES = (state.SNAPSHOT_PURPOSE, chat_services.SERVER_MANAGED_PURPOSE)


def _data_keys_get(key_name: str) -> None:
    for purpose in TURN_PURPOSES:
        crypto.current_data_key(key_name, purpose)


async def _data_key_warm(user_id: int) -> None:
    key_name = vault.user_key_name(user_id)
    try:
        await sync_to_async(_data_keys_get, thread_sensitive=False)(key_name)
    except Exception as exc:  # the turn ensures the key and reports what still fails
        logger.info("data key of user %s not warmed: %s", user_id, exc)
        return
    _keyed_users.add(user_id)


def _not_retryable(chat_id: str, message_id: str, status: str) -> FrameError:
    return FrameError(
        ErrorCode.CONFLICT,
        f"The message is {status}; only a failed, interrupted or cancelled turn can be retried.",
        chat_id=chat_id,
        message_id=message_id,
    )


@dataclass(frozen=True, slots=True)
class _Accepted:
    """What the accept call found and wrote: the chat (its instance loaded with it), the
    user's role there, ``started`` (False for a repeated ``message.send`` of an id
    already accepted), the chat's done-message count read in the same call and, for a
    new question, its ``branch`` (None: read when the turn starts)."""

    chat: Chat
    role: str
    started: bool
    done_count: int
    branch: Branch | None = None


def _turn_chat(*, chat_id: str, user: Any, message_id: str) -> TurnChat:
    """The chat of a turn with the user's role and done count (one query).

    Raises:
        FrameError: ``not_found`` for a chat that is not the user's; ``forbidden`` when
            the user is no longer a member of the chat's instance; ``read_only`` for a
            server-managed chat.
    """
    return _turn_chat_check(
        turn_chat_get(chat_id=chat_id, user=user), chat_id=chat_id, message_id=message_id
    )


def _accepted_read(read: chat_services.AcceptRead, *, chat_id: str, message_id: str) -> _Accepted:
    """The :class:`_Accepted` of ``chats.services.turn_accept_read``'s answer, or the
    frame's error when it refused the turn."""
    found = _turn_chat_check(read.found, chat_id=chat_id, message_id=message_id)
    return _Accepted(found.chat, str(found.role), read.started, found.done_count, read.branch)


def _turn_chat_check(found: TurnChat | None, *, chat_id: str, message_id: str) -> TurnChat:
    """``found`` when the user may start a turn in it; else the frame's error."""
    if found is None:
        raise FrameError(ErrorCode.NOT_FOUND, "No such chat.", chat_id=chat_id)
    if found.role is None:
        raise FrameError(
            ErrorCode.FORBIDDEN, NOT_A_MEMBER, chat_id=found.chat.pk, message_id=message_id
        )
    if found.chat.mode != ChatMode.CLIENT_ENCRYPTED:
        raise _read_only(chat_id=found.chat.pk, message_id=message_id)
    return found


def _accept(
    *,
    chat_id: str,
    user: Any,
    message_id: str,
    assistant_message_id: str,
    retry: bool,
    parent_id: str | chat_services.Parent | None = chat_services.Parent.NEWEST,
    file_embed_ids: tuple[str, ...] = (),
    mate: str | None = None,
) -> _Accepted:
    """One sync call, so one thread hop for a turn's start. A new message without files
    takes one round trip (``chats.services.turn_accept_read``: the chat, the write, the
    branch); otherwise, or when that could not tell why it wrote nothing, the steps one
    by one: the chat with the user's role and its done count
    (``chats.selectors.turn_chat_get``), then the turn's first write
    (``chats.services.turn_accept`` after ``parent_id``, with the embeds of the message's
    files in the same transaction, or ``turn_retry`` for a retry), then the branch. A
    requested ``mate`` is checked (:func:`_mate_check`) before anything is written.

    Raises:
        FrameError: ``not_found`` for a chat that is not the user's; ``forbidden`` when
            the user is no longer a member of the chat's instance (checked before any
            write); ``not_found``, ``conflict`` or ``invalid_frame`` for the message id
            or the parent; ``not_found`` for a mate the instance does not have.
    """
    if not retry and not file_embed_ids and mate is None:
        read = chat_services.turn_accept_read(
            chat_id=chat_id,
            user=user,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            parent_id=parent_id,
        )
        if read is not None:
            return _accepted_read(read, chat_id=chat_id, message_id=message_id)
    found = _turn_chat(chat_id=chat_id, user=user, message_id=message_id)
    chat, role = found.chat, str(found.role)
    _mate_check(chat, mate, message_id=message_id)
    if retry:
        _reopen(chat=chat, message_id=message_id, assistant_message_id=assistant_message_id)
        return _Accepted(chat, role, True, found.done_count)
    started = _write_accept(
        chat=chat,
        user=user,
        message_id=message_id,
        assistant_message_id=assistant_message_id,
        parent_id=parent_id,
        file_embed_ids=file_embed_ids,
    )
    # The new messages are pending: the count read before them still holds. The branch
    # is read here, on the same thread and connection, rather than by the turn.
    branch = None
    if started:
        branch = (
            message_branch(chat_id=chat.pk, message_id=message_id)
            if found.done_count
            else NO_BRANCH
        )
    return _Accepted(chat, role, started, found.done_count, branch)


def _mate_check(chat: Chat, mate: str | None, *, message_id: str) -> None:
    """Refuse a ``mate`` override (``message.send``, ``message.regenerate``) that names no
    mate of the chat's instance, by name or category, as the turn picks one
    (``pipeline.turn``); None asks for none. Blocking.

    Raises:
        FrameError: ``not_found`` naming the chat and the message.
    """
    if mate is None:
        return
    if not any(mate in (found.name, found.category) for found in mates_for_instance(chat.instance)):
        raise FrameError(
            ErrorCode.NOT_FOUND,
            f"No mate {mate!r} in this chat's instance (overrides.mate names a mate or its"
            " category).",
            chat_id=chat.pk,
            message_id=message_id,
        )


def _write_accept(
    *,
    chat: Chat,
    user: Any,
    message_id: str,
    assistant_message_id: str,
    parent_id: str | chat_services.Parent | None,
    file_embed_ids: tuple[str, ...],
) -> bool:
    """:func:`_accept`'s write step by step (``chats.services.turn_accept``, then the
    embeds of the message's files, in one transaction); whether the turn started.

    Raises:
        FrameError: ``not_found``, ``conflict`` or ``invalid_frame`` for the chat, the
            message id or the parent.
    """
    try:
        with transaction.atomic() if file_embed_ids else contextlib.nullcontext():
            started = chat_services.turn_accept(
                chat=chat,
                user=user,
                message_id=message_id,
                assistant_message_id=assistant_message_id,
                parent_id=parent_id,
            )
            if started:
                chat_services.file_embeds_create(
                    chat=chat, message_id=message_id, embed_ids=file_embed_ids
                )
    except chat_services.NotFound:
        raise FrameError(ErrorCode.NOT_FOUND, "No such chat.", chat_id=chat.pk) from None
    except chat_services.BadParent as bad:
        raise FrameError(
            ErrorCode.NOT_FOUND if bad.missing else ErrorCode.INVALID_FRAME,
            "No such message to follow." if bad.missing else "parent_id must name an answer.",
            chat_id=chat.pk,
            message_id=message_id,
        ) from None
    except chat_services.IdInUse as in_use:
        raise _id_in_use(in_use, message_id=message_id) from None
    return started


@dataclass(frozen=True, slots=True)
class _Regenerated:
    """What :func:`_accept_regenerate` wrote: the turn's chat, the user's role, the
    question answered again and the chat's done count."""

    chat: Chat
    role: str
    question_id: str
    done_count: int


def _accept_regenerate(
    *, chat_id: str, user: Any, answer_id: str, assistant_message_id: str, mate: str | None
) -> _Regenerated:
    """:func:`_accept` for ``message.regenerate``: ``chats.services.turn_regenerate``.

    Raises:
        FrameError: as :func:`_turn_chat`; ``not_found`` for an answer the chat does not
            have, ``conflict`` for one still being answered or answering no question.
    """
    found = _turn_chat(chat_id=chat_id, user=user, message_id=answer_id)
    _mate_check(found.chat, mate, message_id=answer_id)
    ids = {"chat_id": found.chat.pk, "message_id": answer_id}
    try:
        question_id = chat_services.turn_regenerate(
            chat=found.chat, message_id=answer_id, assistant_message_id=assistant_message_id
        )
    except chat_services.NotFound:
        raise FrameError(ErrorCode.NOT_FOUND, "No such answer.", **ids) from None
    except chat_services.NotRetryable as refused:
        raise FrameError(
            ErrorCode.CONFLICT,
            f"The answer is {refused.status} or answers no question; it cannot be regenerated.",
            **ids,
        ) from None
    except chat_services.IdInUse as in_use:
        raise _id_in_use(in_use, **ids) from None
    return _Regenerated(found.chat, str(found.role), question_id, found.done_count)


def _reopen(*, chat: Chat, message_id: str, assistant_message_id: str) -> None:
    """``chats.services.turn_retry``, its refusals as ``FrameError``."""
    try:
        chat_services.turn_retry(
            chat=chat, message_id=message_id, assistant_message_id=assistant_message_id
        )
    except chat_services.NotFound:
        raise FrameError(
            ErrorCode.NOT_FOUND, "No such message.", chat_id=chat.pk, message_id=message_id
        ) from None
    except chat_services.NotRetryable as refused:
        raise _not_retryable(chat.pk, message_id, refused.status) from None
    except chat_services.IdInUse as in_use:
        raise _id_in_use(in_use, message_id=message_id) from None


def _id_in_use(in_use: chat_services.IdInUse, **ids: str) -> FrameError:
    """The ``invalid_frame`` for an id that names another object: which id it was (a
    file's ``embed_id`` or the message's)."""
    which = "A file's embed_id" if "embed" in str(in_use) else "That message id"
    return FrameError(ErrorCode.INVALID_FRAME, f"{which} is already in use.", **ids)


async def _retry_content(socket: Socket, *, chat_id: str, message_id: str) -> str:
    """The kept text of a message to retry; refuses a retry early, before the text is read
    (``turn_retry`` checks the status again under the row locks).

    Raises:
        FrameError: ``not_found`` (no such chat or message, or its text is gone) or
            ``conflict`` (the message's turn did not fail).
    """
    chat = await _chat_or_not_found(socket, chat_id)
    if chat.mode != ChatMode.CLIENT_ENCRYPTED:
        raise _read_only(chat_id=chat.pk, message_id=message_id)
    status = await auser_message_status(chat_id=chat.pk, message_id=message_id)
    if status is None:
        raise FrameError(
            ErrorCode.NOT_FOUND,
            "No such question to retry: message.retry names a user message of the chat.",
            chat_id=chat.pk,
            message_id=message_id,
        )
    if status not in chat_services.RETRYABLE_STATUSES:
        raise _not_retryable(chat.pk, message_id, status)
    content = await state.pending_content_load(user_id=socket.user.pk, message_id=message_id)
    if content is None:
        raise FrameError(
            ErrorCode.NOT_FOUND,
            "The message text is no longer available; send it again.",
            chat_id=chat_id,
            message_id=message_id,
        )
    return content


def _early_start(
    socket: Socket, chat_id: str, content: str | None, frame: p.MessageSend | None
) -> EarlyReads:
    """The turn's Redis reads, the message's vectors and pre-processing on the chat's last
    accepted instance and role (``pipeline.speculate``), run while the accept call writes
    (the user's own keys only)."""
    requested = _requested(frame)
    return early_reads_start(
        user_id=socket.user.pk,
        chat_id=chat_id,
        content=content,
        guess=speculate.guess_for(user_id=socket.user.pk, chat_id=chat_id),
        requested_tier=requested["requested_tier"],
        requested_tools=requested["requested_tools"],
    )


async def _turn_start(
    socket: Socket,
    *,
    chat_id: str,
    message_id: str,
    content: str | None,
    frame: p.MessageSend | None,
    files: tuple[turn_files.TurnFile, ...] = (),
) -> None:
    """Accept a turn (the rate limits were counted by ``dispatch``) and launch it, with
    the message's ``files`` read already (:func:`_files_read`)."""
    retry = frame is None
    if retry:
        content = await _retry_content(socket, chat_id=chat_id, message_id=message_id)
    assistant_message_id = new_id()
    parent: str | chat_services.Parent | None = chat_services.Parent.NEWEST
    if frame is not None and frame.parent_given:
        parent = frame.parent_id
    early = _early_start(socket, chat_id, content, frame) if not retry else None
    if early is not None:
        await asyncio.sleep(0)  # the reads send their Redis commands before the accept runs
    try:
        accepted = await db_call(
            _accept,
            chat_id=chat_id,
            user=socket.user,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            retry=retry,
            parent_id=parent,
            file_embed_ids=tuple(f.embed_id for f in files),
            mate=_requested(frame)["requested_mate"],
        )
    except BaseException:
        early_reads_drop(early)
        raise
    if not accepted.started:
        early_reads_drop(early)
        await _duplicate(socket, chat_id=chat_id, message_id=message_id)
        return
    await _accepted_launch(
        socket,
        frame,
        accepted,
        message_id=message_id,
        assistant_message_id=assistant_message_id,
        content=str(content),
        files=files,
        early=early,
    )


def _requested(frame: p.MessageSend | p.MessageRegenerate | None) -> dict[str, Any]:
    """What a ``message.send`` or ``message.regenerate`` asks of its turn (a retry asks
    nothing)."""
    overrides = frame.overrides if frame is not None else None
    history = frame.history if isinstance(frame, p.MessageSend) else None
    return {
        "client_history": tuple(m.model_dump() for m in history) if history else None,
        "requested_tier": overrides.tier if overrides else None,
        "requested_tools": tuple(overrides.tools) if overrides and overrides.tools else None,
        "requested_mate": overrides.mate if overrides else None,
    }


async def _accepted_launch(
    socket: Socket,
    frame: p.MessageSend | p.MessageRegenerate | None,
    accepted: _Accepted | _Regenerated,
    *,
    message_id: str,
    assistant_message_id: str,
    content: str,
    regenerate: bool = False,
    files: tuple[turn_files.TurnFile, ...] = (),
    early: EarlyReads | None = None,
) -> None:
    """Launch the turn of an accepted ``message.send`` or ``message.regenerate``:
    ``accepted`` carries the chat, the user's role and the chat's done count; ``frame``
    the client's overrides (None: a retry, which asks none); ``early`` the turn's reads
    started beside the accept."""
    try:
        # After the chat was found: a deleted account's key is never made again (see there).
        await user_key_ensure(socket.user.pk)
    except BaseException:
        early_reads_drop(early)
        raise
    chat = accepted.chat
    speculate.guess_keep(
        user_id=socket.user.pk, chat_id=chat.pk, instance=chat.instance, role=accepted.role
    )
    await _turn_launch(
        socket,
        TurnRequest(
            task_id=new_id(),
            user_id=socket.user.pk,
            chat=chat,
            instance=chat.instance,
            role=accepted.role,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            content=content,
            done_count=accepted.done_count,
            regenerate=regenerate,
            files=files,
            branch=accepted.branch if isinstance(accepted, _Accepted) else None,
            early=early,
            **_requested(frame),
        ),
    )


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


def _files_read(
    frame: p.MessageSend | p.MessageRetry | p.MessageRegenerate,
) -> tuple[turn_files.TurnFile, ...]:
    """The frame's files as the turn uses them (``pipeline.files.turn_file``: decoded,
    a text file's UTF-8 checked, a PDF's text extracted). Blocking.

    Raises:
        FrameError: ``unsupported_file`` naming the first file that cannot be read.
    """
    read = []
    for attached in frame.files or ():
        try:
            read.append(
                turn_files.turn_file(
                    embed_id=attached.embed_id,
                    name=attached.name,
                    mime=attached.mime,
                    data_b64=attached.data,
                )
            )
        except turn_files.UnsupportedFile as bad:
            raise FrameError(
                ErrorCode.UNSUPPORTED_FILE,
                f"{attached.name[:80]!r} {bad}.",
                chat_id=frame.chat_id,
                message_id=frame.message_id,
            ) from None
    return tuple(read)


async def message_send(socket: Socket, frame: p.MessageSend) -> None:
    """Accept and start the message's turn; its files are read first, off the event
    loop, so a file that cannot be read refuses the frame before anything is written."""
    files = await asyncio.to_thread(_files_read, frame) if frame.files else ()
    await _turn_start(
        socket,
        chat_id=frame.chat_id,
        message_id=frame.message_id,
        content=frame.content,
        frame=frame,
        files=files,
    )


async def message_retry(socket: Socket, frame: p.MessageRetry) -> None:
    """Answer again a question whose turn ended without an answer, with the files the
    frame carries (the question's: docs/protocol.md §13), read first."""
    files = await asyncio.to_thread(_files_read, frame) if frame.files else ()
    await _turn_start(
        socket,
        chat_id=frame.chat_id,
        message_id=frame.message_id,
        content=None,
        frame=None,
        files=files,
    )


async def message_regenerate(socket: Socket, frame: p.MessageRegenerate) -> None:
    """A new version of the answer ``frame.message_id``: a turn answering its question
    again, from the same point of the branch (docs/protocol.md §3), with the files the
    frame carries (the question's, which the client holds: §13), read first."""
    files = await asyncio.to_thread(_files_read, frame) if frame.files else ()
    assistant_message_id = new_id()
    accepted = await db_call(
        _accept_regenerate,
        chat_id=frame.chat_id,
        user=socket.user,
        answer_id=frame.message_id,
        assistant_message_id=assistant_message_id,
        mate=frame.overrides.mate if frame.overrides else None,
    )
    await _accepted_launch(
        socket,
        frame,
        accepted,
        message_id=accepted.question_id,
        assistant_message_id=assistant_message_id,
        content=frame.content,
        regenerate=True,
        files=files,
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
                reason=snapshot.reason,
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


def _history_read(
    messages: Sequence[p.ChatHistoryMessage], budget_tokens: int
) -> list[dict[str, Any]]:
    """The history's messages as AI cache entries ``{message_id, role, content}``, a
    user message's files read into its ``content`` (``pipeline.files``). Blocking."""
    entries = []
    for message in messages:
        entry = message.model_dump(exclude={"files"})
        if message.files:
            read = [
                turn_files.earlier_file(
                    embed_id=f.embed_id, name=f.name, mime=f.mime, data_b64=f.data
                )
                for f in message.files
            ]
            entry["content"] = turn_files.earlier_message_text(
                message.content, read, budget_tokens=budget_tokens
            )
        entries.append(entry)
    return entries


async def _history_entries(
    chat: Chat, messages: Sequence[p.ChatHistoryMessage]
) -> list[dict[str, Any]]:
    """:func:`_history_read` off the event loop when files came along. The tier that
    answers is not decided yet, so the files' text is cut to the share of the smallest
    context among the instance's tiers: the message then fits any tier's history."""
    if not any(m.files for m in messages):
        return [m.model_dump(exclude={"files"}) for m in messages]
    context = min([await llm.context_tokens(tier=t, instance=chat.instance) for t in llm.TIERS])
    budget = turn_files.files_budget_tokens(
        context_tokens=context, reserve_tokens=answer_reserve_tokens(context)
    )
    return await asyncio.to_thread(_history_read, messages, budget)


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
        messages=await _history_entries(chat, frame.messages),
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
    if frame.request_id is None:
        # A change in the chat's UI: the list is the whole answer (docs/protocol.md §3).
        answers = dict.fromkeys(p.MEMORY_CATEGORIES, "denied")
    else:
        consent = await state.memory_consent_load(frame.chat_id)
        answers = {c: "denied" for c, value in consent.items() if value == "asked"}
    answers.update(dict.fromkeys(frame.allowed, "allowed"))
    await state.memory_consent_answer(
        chat_id=frame.chat_id, user_id=socket.user.pk, answers=answers
    )


# --- chats and messages -----------------------------------------------------------------


async def _chat_event(socket: Socket, frame: dict[str, Any]) -> None:
    """Answer the asking socket with ``frame`` (``chat.*``, ``message.stored``) and send it,
    without ``request_id``, to the user's other sockets on every process (the user's
    group, docs/protocol.md §4)."""
    await socket.deliver(frame)
    shared = {key: value for key, value in frame.items() if key != "request_id"}
    await auser_sockets_send(socket.user.pk, shared, origin=socket.channel_name)


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
    await _chat_event(
        socket,
        ev.ChatCreated(
            chat_id=chat.pk, version=chat.version, request_id=frame.request_id
        ).to_frame(),
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
    except chat_services.ReadOnlyChat:
        raise _read_only(**frame_ids(frame)) from None
    await _chat_event(
        socket,
        ev.ChatUpdated(
            chat_id=updated.pk, version=updated.version, request_id=frame.request_id
        ).to_frame(),
    )


async def chat_delete(socket: Socket, frame: p.ChatDelete) -> None:
    chat = await _chat_or_not_found(socket, frame.chat_id)
    await sync_to_async(chat_services.chat_delete)(chat=chat)
    # Its turns stop now, not at their owner's next heartbeat (which also notices).
    await _chat_turns_cancel(socket, frame.chat_id)
    await _chat_event(
        socket,
        ev.ChatDeleted(
            chat_id=frame.chat_id, version=chat.version + 1, request_id=frame.request_id
        ).to_frame(),
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
    except chat_services.ReadOnlyChat:
        raise _read_only(chat_id=frame.chat_id, message_id=frame.message_id) from None
    await _chat_event(
        socket,
        ev.MessageStored(
            chat_id=frame.chat_id, message_id=message.pk, version=message.version
        ).to_frame(),
    )


def _sync_answer(user: Any, known: dict[str, int]) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """The sync's phases and the chats of ``known`` that are gone (``chats.sync``)."""
    return sync_phases(user=user, known=known), chats_gone(user=user, known=known)


async def sync_request(socket: Socket, frame: p.SyncRequest) -> None:
    phases, gone = await sync_to_async(_sync_answer)(socket.user, dict(frame.known))
    total = 0
    for number, chats in enumerate(phases, start=1):
        total += len(chats)
        for part in ev.SyncPhase(phase=number, chats=tuple(chats)).to_frames():
            await socket.deliver(part)
    await socket.deliver(ev.SyncDone(total_chats=total, deleted=tuple(gone)).to_frame())


async def ping(socket: Socket, frame: p.Ping) -> None:
    await socket.deliver(ev.Pong(ts=frame.ts).to_frame())


_ACTIONS: dict[str, Callable[[Socket, Any], Awaitable[None]]] = {
    "chat.create": chat_create,
    "chat.update": chat_update,
    "chat.delete": chat_delete,
    "message.send": message_send,
    "message.retry": message_retry,
    "message.regenerate": message_regenerate,
    "message.store": message_store,
    "chat.history": chat_history,
    "memory.consent": memory_consent,
    "task.cancel": task_cancel,
    "skill.cancel": skill_cancel,
    "stream.resume": stream_resume,
    "sync.request": sync_request,
    "ping": ping,
}
