"""Writes for chats, messages, embeds and user keys (STYLE.md: services own their writes).

Ids are client-chosen UUID strings (docs/crypto.md §1); an id is accepted once: reusing one
that names another object raises :class:`IdInUse` (the consumer answers
``invalid_frame``). Versions are compare-and-set: a write names the version it is based
on and gets :class:`VersionConflict` when that is stale.

Versions and associated data (docs/crypto.md §3):

* ``Chat.version`` grows with every change to the chat or one of its messages; ``sync``
  compares it. ``Chat.meta_version`` is the version the encrypted metadata fields were
  last written at and is the ``version`` in their associated data. ``chat_update(version=v)``
  accepts ``v`` when ``meta_version <= v <= version``; the new fields must be encrypted
  with ``version = v + 1``, which becomes the new ``meta_version``.
* ``Message.version`` starts at 0 (no ciphertext). ``message_store(version=v)`` is based
  on ``v`` and needs ``v == message.version``; the ciphertext is encrypted with
  ``version = v + 1``, the version ``message.stored`` reports.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import BinaryField, Case, F, Field, Value, When
from django.utils import timezone

from chats import cache, selectors
from chats.models import (
    Chat,
    ChatMode,
    Embed,
    EmbedStatus,
    Message,
    MessageRole,
    MessageStatus,
    UserKeys,
)
from openmates import crypto, vault
from openmates.ids import FILE_EMBED_CIPHERTEXT_CHARS, FILE_EMBED_TOOL, MAX_MESSAGE_CIPHERTEXT_CHARS

logger = logging.getLogger(__name__)

SERVER_MANAGED_PURPOSE = "server-managed"
_UNSET: Any = object()


class VersionConflict(Exception):  # noqa: N818 - the name is the helpers' contract
    """A write was based on a stale version; ``current_version`` is the stored one."""

    def __init__(self, message: str, *, current_version: int) -> None:
        super().__init__(message)
        self.current_version = current_version


class IdInUse(Exception):  # noqa: N818 - reads as the condition it reports
    """A client-chosen id already names another object (or another user's object)."""


class Parent(enum.Enum):
    """Where a new question goes when its client names no parent: after the chat's
    newest message (``NEWEST``; a chat without messages: a first message)."""

    NEWEST = "newest"


class BadParent(Exception):  # noqa: N818 - reads as the condition it reports
    """The parent a new question names is no answer of its chat; ``missing`` when no
    message of the chat has that id."""

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


class NotFound(Exception):  # noqa: N818 - reads as the condition it reports
    """The object does not exist for this chat or user (the interfaces answer 404)."""


class ReadOnlyChat(Exception):  # noqa: N818 - reads as the condition it reports
    """The chat is server-managed (``/v1``, a channel, ``manage.py chat``): the server keeps
    its content and title, it has no chat key, so it takes no client ciphertext (messages,
    embeds, encrypted metadata). The interfaces answer ``read_only`` (REST 409,
    docs/api.md; WebSocket ``error``, docs/protocol.md §8)."""


SERVER_MANAGED_READ_ONLY = (
    "This chat was made through the API or a messaging app and is kept by the server: "
    "continue it there; it takes no encrypted content, title or turn from here."
)


def _writable_check(chat: Chat) -> None:
    """Raise :class:`ReadOnlyChat` unless ``chat`` takes client ciphertext."""
    if chat.mode != ChatMode.CLIENT_ENCRYPTED:
        raise ReadOnlyChat(SERVER_MANAGED_READ_ONLY)


def _lock_chat(chat_id: str) -> bool:
    """Lock the chat's row (``FOR NO KEY UPDATE``) inside the caller's transaction.

    Lock order, kept by every service that locks a chat and any of its messages or
    embeds: the chat first, then the message or embed (row locks taken in two orders by
    two transactions deadlock in PostgreSQL). ``NO KEY UPDATE`` is the lock an
    ``UPDATE`` of the chat takes anyway, and it does not block inserts of messages or
    embeds that merely reference the chat. Returns whether the chat exists.
    """
    return bool(Chat.objects.select_for_update(no_key=True).filter(pk=chat_id).values_list("pk"))


def _bump_chat(chat_id: str) -> int:
    """Raise the chat's version by one inside the caller's transaction; return it."""
    Chat.objects.filter(pk=chat_id).update(version=F("version") + 1, updated_at=timezone.now())
    return int(Chat.objects.values_list("version", flat=True).get(pk=chat_id))


def _seal_text(*, owner_id: int, object_id: str, text: str) -> bytes:
    return crypto.seal(
        key_name=vault.user_key_name(owner_id),
        purpose=SERVER_MANAGED_PURPOSE,
        owner_id=owner_id,
        object_id=object_id,
        plaintext=text.encode("utf-8"),
    )


def sealed_text_open(*, owner_id: int, object_id: str, sealed: bytes | memoryview) -> str:
    """Open a ``server-managed`` envelope written by this module.

    Raises:
        openmates.crypto.DecryptionError: the user's key was replaced or deleted, or the
            bytes were tampered with or moved to another object.
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    return crypto.open_sealed(
        key_name=vault.user_key_name(owner_id),
        purpose=SERVER_MANAGED_PURPOSE,
        owner_id=owner_id,
        object_id=object_id,
        sealed=bytes(sealed),
    ).decode("utf-8")


# --- Chats ---------------------------------------------------------------------------


def chat_create(
    *,
    user: Any,
    chat_id: str,
    instance: Any,
    encrypted_chat_key: str,
    encrypted_title: str | None = None,
) -> Chat:
    """Create a client-encrypted chat at version 1 (``encrypted_title`` bound to version 1).

    A repeated create of the same chat by its owner with the same key returns the chat.

    Raises:
        IdInUse: ``chat_id`` names another user's chat or a different chat key.
    """
    try:
        with transaction.atomic():
            return Chat.objects.create(
                id=chat_id,
                owner=user,
                instance=instance,
                mode=ChatMode.CLIENT_ENCRYPTED,
                encrypted_chat_key=encrypted_chat_key,
                encrypted_title=encrypted_title,
            )
    except IntegrityError as exc:
        existing = Chat.objects.filter(pk=chat_id, owner=user).first()
        if existing is not None and existing.encrypted_chat_key == encrypted_chat_key:
            return existing
        raise IdInUse(f"chat id {chat_id} is already in use") from exc


def server_chat_create(*, user: Any, chat_id: str, instance: Any) -> Chat:
    """Create a server-managed chat (API, Telegram, Slack): content sealed server-side.

    Raises:
        IdInUse: ``chat_id`` already exists.
    """
    try:
        with transaction.atomic():
            return Chat.objects.create(
                id=chat_id, owner=user, instance=instance, mode=ChatMode.SERVER_MANAGED
            )
    except IntegrityError as exc:
        raise IdInUse(f"chat id {chat_id} is already in use") from exc


def server_chat_title_set(*, chat: Chat, title: str) -> None:
    """Seal and store a server-managed chat's title."""
    sealed = _seal_text(owner_id=chat.owner_id, object_id=f"{chat.pk}:title", text=title)
    with transaction.atomic():
        Chat.objects.filter(pk=chat.pk).update(server_title=sealed)
        _bump_chat(chat.pk)


def chat_update(
    *,
    chat: Chat,
    version: int,
    encrypted_title: str | None = _UNSET,
    encrypted_summary: str | None = _UNSET,
    encrypted_tags: str | None = _UNSET,
    encrypted_category: str | None = _UNSET,
    encrypted_icon: str | None = _UNSET,
    pinned: bool | None = None,
) -> Chat:
    """Change a chat's encrypted metadata and/or ``pinned`` (compare-and-set).

    ``version`` is the version the change is based on (see the module docstring).
    Only the fields passed are changed.

    Raises:
        VersionConflict: ``version`` is older than the metadata or newer than the chat.
        ReadOnlyChat: an encrypted field was given for a server-managed chat (``pinned``
            alone is taken: pinning needs no chat key).
    """
    changes = {
        name: value
        for name, value in (
            ("encrypted_title", encrypted_title),
            ("encrypted_summary", encrypted_summary),
            ("encrypted_tags", encrypted_tags),
            ("encrypted_category", encrypted_category),
            ("encrypted_icon", encrypted_icon),
        )
        if value is not _UNSET
    }
    with transaction.atomic():
        locked = Chat.objects.select_for_update(no_key=True).get(pk=chat.pk)
        if changes:
            _writable_check(locked)
        if not locked.meta_version <= version <= locked.version:
            raise VersionConflict(
                f"chat {chat.pk} is at version {locked.version} "
                f"(metadata {locked.meta_version}), not based on {version}",
                current_version=locked.version,
            )
        for name, value in changes.items():
            setattr(locked, name, value)
        if changes:
            locked.meta_version = version + 1
        if pinned is not None:
            locked.pinned = pinned
        locked.version = max(locked.version + 1, version + 1)
        locked.save()
    return locked


# Apps below chats that keep data of a chat under its id (the memories' consent answers)
# cannot be imported here: an app above both registers their delete (pipeline.apps).
_chat_delete_hooks: list[Callable[..., None]] = []


def chat_delete_hook_register(hook: Callable[..., None]) -> None:
    """Have ``hook(chat_id=…)`` delete what another app keeps of a chat, inside
    :func:`chat_delete`'s transaction (an exception rolls the deletion back)."""
    if hook not in _chat_delete_hooks:
        _chat_delete_hooks.append(hook)


def chat_delete(*, chat: Chat) -> None:
    """Delete a chat with its messages, embeds, what registered apps keep of it
    (:func:`chat_delete_hook_register`: its memory-consent answers) and every cache
    entry of it."""
    chat_id, owner_id = chat.pk, chat.owner_id
    with transaction.atomic():
        # The chat first (the lock order); the cascade then locks messages and embeds.
        _lock_chat(chat_id)
        embed_ids = list(Embed.objects.filter(chat_id=chat_id).values_list("id", flat=True))
        # Messages not answered may have their text kept for a retry.
        unanswered = list(
            Message.objects.filter(chat_id=chat_id, role=MessageRole.USER)
            .exclude(status=MessageStatus.DONE)
            .values_list("id", flat=True)
        )
        Chat.objects.filter(pk=chat_id).delete()
        for hook in _chat_delete_hooks:
            hook(chat_id=chat_id)
    cache.chat_forget(
        user_id=owner_id, chat_id=chat_id, embed_ids=embed_ids, message_ids=unanswered
    )


# --- Messages ------------------------------------------------------------------------


def _messages_create(
    *, chat: Chat, specs: list[tuple[str, str]], parent_id: str | None = None
) -> list[Message]:
    """Create messages ``[(id, role), ...]`` (status ``pending``) in one transaction, the
    first one after ``parent_id``, each next one after the one before it.

    The chat's version rises by one per message and each message records its own
    version. The ``UPDATE`` of the chat comes first: it takes the chat's row lock (the
    lock order of :func:`_lock_chat`), so no separate lock query is needed.

    Raises:
        NotFound: the chat is gone.
        IntegrityError: an id already exists.
    """
    now = timezone.now()
    with transaction.atomic():
        updated = Chat.objects.filter(pk=chat.pk).update(
            version=F("version") + len(specs),
            message_count=F("message_count") + len(specs),
            last_message_at=now,
            updated_at=now,
        )
        if not updated:
            raise NotFound(f"chat {chat.pk} not found")
        version = int(Chat.objects.values_list("version", flat=True).get(pk=chat.pk))
        first = version - len(specs) + 1
        parents = [parent_id, *(message_id for message_id, _ in specs[:-1])]
        return Message.objects.bulk_create(
            Message(
                id=message_id,
                chat=chat,
                role=role,
                status=MessageStatus.PENDING,
                chat_version=first + number,
                parent_id=parents[number],
            )
            for number, (message_id, role) in enumerate(specs)
        )


def _newest_message_id(chat_id: str) -> str | None:
    """The chat's newest message (a question before the answer made with it)."""
    return (
        Message.objects.filter(chat_id=chat_id)
        .order_by("-created_at", "role", "-id")  # "assistant" < "user": the answer
        .values_list("pk", flat=True)
        .first()
    )


def _message_create(*, chat: Chat, message_id: str, role: str, status: str) -> Message:
    """One message after the chat's newest one (a linear chat's next message)."""
    (message,) = _messages_create(
        chat=chat, specs=[(message_id, role)], parent_id=_newest_message_id(chat.pk)
    )
    if status != MessageStatus.PENDING:
        Message.objects.filter(pk=message_id).update(status=status)
        message.status = status
    return message


def user_message_accept(*, chat: Chat, message_id: str, user: Any) -> tuple[Message, bool]:
    """Record the user's message (status ``pending`` until its turn ends); idempotent.

    Returns ``(message, created)``: the same message id sent twice gives one message and
    ``created=False`` the second time.

    Raises:
        NotFound: ``user`` does not own ``chat``.
        IdInUse: ``message_id`` names a message of another chat or role.
    """
    if chat.owner_id != user.pk:
        raise NotFound(f"chat {chat.pk} not found")
    existing = Message.objects.filter(pk=message_id).first()
    if existing is not None:
        if existing.chat_id == chat.pk and existing.role == MessageRole.USER:
            return existing, False
        raise IdInUse(f"message id {message_id} is already in use")
    try:
        return (
            _message_create(
                chat=chat,
                message_id=message_id,
                role=MessageRole.USER,
                status=MessageStatus.PENDING,
            ),
            True,
        )
    except IntegrityError:
        # Two sockets raced with the same id: the other one created it.
        existing = Message.objects.filter(pk=message_id, chat=chat, role=MessageRole.USER).first()
        if existing is None:
            raise IdInUse(f"message id {message_id} is already in use") from None
        return existing, False


def assistant_message_create(*, chat: Chat, message_id: str) -> Message:
    """Create the assistant message a turn answers into (status ``pending``).

    Raises:
        IdInUse: ``message_id`` already exists.
    """
    try:
        return _message_create(
            chat=chat,
            message_id=message_id,
            role=MessageRole.ASSISTANT,
            status=MessageStatus.PENDING,
        )
    except IntegrityError as exc:
        raise IdInUse(f"message id {message_id} is already in use") from exc


def message_status_set(*, message_id: str, status: str) -> None:
    """Set a message's status (one of :class:`chats.models.MessageStatus`).

    Raises:
        ValueError: unknown status.
        NotFound: no such message.
    """
    if status not in MessageStatus.values:
        raise ValueError(f"unknown message status {status!r}")
    with transaction.atomic():
        chat_id = Message.objects.filter(pk=message_id).values_list("chat_id", flat=True).first()
        if chat_id is None:
            raise NotFound(f"message {message_id} not found")
        _lock_chat(chat_id)
        _status_write(chat_id=chat_id, message_id=message_id, status=status)


def _status_write(*, chat_id: str, message_id: str, status: str, failure_reason: str = "") -> int:
    """Set a message's status (and its ``failure_reason``) inside the caller's transaction
    (the chat locked): the chat's version rises by one and the message records it. Returns
    the rows changed (0 or 1); the version rises either way, so callers check the message
    exists or roll back."""
    new_version = _bump_chat(chat_id)
    return Message.objects.filter(pk=message_id, chat_id=chat_id).update(
        status=status,
        failure_reason=failure_reason,
        chat_version=new_version,
        updated_at=timezone.now(),
    )


def assistant_reply_keep(
    *, chat: Chat, message_id: str, content: str, model: str, usage: dict[str, int] | None
) -> None:
    """Keep a reply server-encrypted in its row until a client stores its own ciphertext.

    For server-managed chats this copy is the permanent one. ``usage`` is
    ``{"prompt_tokens": int, "completion_tokens": int}``.

    Raises:
        NotFound: no such message in ``chat``.
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    sealed = _seal_text(owner_id=chat.owner_id, object_id=message_id, text=content)
    usage = usage or {}
    with transaction.atomic():
        _lock_chat(chat.pk)
        updated = Message.objects.filter(pk=message_id, chat_id=chat.pk).update(
            server_content=sealed,
            model=model or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            updated_at=timezone.now(),
        )
        if not updated:
            raise NotFound(f"message {message_id} not found in chat {chat.pk}")
        new_version = _bump_chat(chat.pk)
        Message.objects.filter(pk=message_id).update(chat_version=new_version)


def user_message_keep(*, chat: Chat, message_id: str, content: str) -> bool:
    """Keep a user message server-encrypted when its client has not stored it yet.

    A turn ends with the user's text in hand; when the tab closed before its own
    ``message.store``, this copy (``pending_server_copy``) lets the next load encrypt
    and store it like a kept reply. A message whose ciphertext is already stored is left
    alone, and ``message_store`` deletes the copy. Only for client-encrypted chats
    (server-managed ones keep every message anyway). Returns whether a copy was kept.

    Raises:
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    unstored = Message.objects.filter(
        pk=message_id, chat_id=chat.pk, role=MessageRole.USER, encrypted_content__isnull=True
    )
    if chat.mode != ChatMode.CLIENT_ENCRYPTED or not unstored.exists():
        return False
    sealed = _seal_text(owner_id=chat.owner_id, object_id=message_id, text=content)
    with transaction.atomic():
        _lock_chat(chat.pk)
        # Under the chat's lock: a message.store that won the race is not overwritten.
        if not unstored.update(server_content=sealed, updated_at=timezone.now()):
            return False
        new_version = _bump_chat(chat.pk)
        Message.objects.filter(pk=message_id).update(chat_version=new_version)
    return True


def server_message_create(
    *, chat: Chat, message_id: str, role: str, content: str, status: str = MessageStatus.DONE
) -> Message:
    """Add a message to a server-managed chat, its content sealed server-side, after the
    chat's newest message.

    Raises:
        ValueError: ``chat`` is client-encrypted (its content belongs to the browser).
        IdInUse: ``message_id`` already exists.
    """
    if chat.mode != ChatMode.SERVER_MANAGED:
        raise ValueError("only server-managed chats keep message content server-side")
    sealed = _seal_text(owner_id=chat.owner_id, object_id=message_id, text=content)
    try:
        message = _message_create(chat=chat, message_id=message_id, role=role, status=status)
    except IntegrityError as exc:
        raise IdInUse(f"message id {message_id} is already in use") from exc
    Message.objects.filter(pk=message_id).update(server_content=sealed)
    message.server_content = sealed
    return message


def message_store(*, chat: Chat, message_id: str, encrypted_content: str, version: int) -> Message:
    """Store the client's ciphertext of a message (compare-and-set on ``version``).

    On success the message is at ``version + 1`` and a kept server-encrypted copy is
    deleted. Storing the same ciphertext again at the same base is a no-op.

    Raises:
        NotFound: no such message in ``chat``.
        VersionConflict: ``version`` differs from the stored version.
        ReadOnlyChat: ``chat`` is server-managed.
    """
    _writable_check(chat)
    with transaction.atomic():
        _lock_chat(chat.pk)
        message = Message.objects.select_for_update().filter(pk=message_id, chat_id=chat.pk).first()
        if message is None:
            raise NotFound(f"message {message_id} not found in chat {chat.pk}")
        if message.version == version + 1 and message.encrypted_content == encrypted_content:
            return message
        if message.version != version:
            raise VersionConflict(
                f"message {message_id} is at version {message.version}, not {version}",
                current_version=message.version,
            )
        message.encrypted_content = encrypted_content
        message.server_content = None
        message.version = version + 1
        message.chat_version = _bump_chat(chat.pk)
        message.save()
    return message


# --- Turns: every write of a turn is one service and one transaction ---------------------

RETRYABLE_STATUSES = (MessageStatus.FAILED, MessageStatus.INTERRUPTED, MessageStatus.CANCELLED)
UNFINISHED_STATUSES = (MessageStatus.PENDING, MessageStatus.STREAMING)
# The statuses of an answer that ended without its whole text: they keep a failure reason.
FAILURE_STATUSES = (MessageStatus.FAILED, MessageStatus.INTERRUPTED)


class NotRetryable(Exception):  # noqa: N818 - reads as the condition it reports
    """The user message's turn did not end failed, interrupted or cancelled; ``status``
    is the message's status."""

    def __init__(self, message: str, *, status: str) -> None:
        super().__init__(message)
        self.status = status


def turn_accept(
    *,
    chat: Chat,
    user: Any,
    message_id: str,
    assistant_message_id: str,
    parent_id: str | Parent | None = Parent.NEWEST,
) -> bool:
    """Accept a turn: write the user message and the assistant message answering it (both
    ``pending``; the chat's version and message count rise by two), atomically, in one
    SQL statement (:func:`_turn_messages_insert`): a turn's start pays one round trip.

    The user message goes after ``parent_id``: an answer of the chat (the branch it
    continues, or the parent of a question it edits), ``None`` for a first message (an
    edit of the chat's first question), by default after the chat's newest message
    (found inside the statement). The answer goes after the user message.

    Idempotent: returns ``False`` (and writes nothing) when the user message already
    exists in this chat, ``True`` when both were written.

    Raises:
        NotFound: ``user`` does not own ``chat``, or the chat is gone.
        BadParent: ``parent_id`` names no assistant message of the chat.
        IdInUse: ``message_id`` names a message of another chat or role, or
            ``assistant_message_id`` is taken.
    """
    if chat.owner_id != user.pk:
        raise NotFound(f"chat {chat.pk} not found")
    if isinstance(parent_id, str):
        _answer_check(chat_id=chat.pk, message_id=parent_id)
    specs = [
        (message_id, MessageRole.USER, parent_id),
        (assistant_message_id, MessageRole.ASSISTANT, message_id),
    ]
    try:
        # Inside a caller's transaction a savepoint keeps an id clash from aborting it.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            inserted = _turn_messages_insert(chat=chat, specs=specs)
    except IntegrityError:
        # Sent before (a repeated message.send, or two sockets racing), or another's id.
        if Message.objects.filter(pk=message_id, chat=chat, role=MessageRole.USER).exists():
            return False
        raise IdInUse(f"message id {message_id} or {assistant_message_id} is in use") from None
    if not inserted:
        raise NotFound(f"chat {chat.pk} not found")
    return True


@dataclass(frozen=True, slots=True)
class AcceptRead:
    """What :func:`turn_accept_read` found and wrote: ``found`` the chat as
    ``chats.selectors.turn_chat_get`` returns it (``None``: not the user's chat; its
    ``role`` ``None``: no longer a member; nothing was written in either case),
    ``started`` whether the turn's two messages were written, and ``branch`` the
    question's branch (``chats.selectors.NO_BRANCH`` for a chat with no done message or
    a turn not started)."""

    found: selectors.TurnChat | None
    started: bool
    branch: selectors.Branch


def turn_accept_read(
    *,
    chat_id: str,
    user: Any,
    message_id: str,
    assistant_message_id: str,
    parent_id: str | Parent | None = Parent.NEWEST,
) -> AcceptRead | None:
    """A turn's start in one round trip: ``chats.selectors.turn_chat_get``'s read, the
    write of :func:`turn_accept` when the user owns the chat, is a member of its
    instance and the chat is client-encrypted (a client's turn in a server-managed chat
    is refused; the caller's stepwise path says so), and ``parent_id``, when it names a
    message, is an answer of the chat, and
    the question's branch (``chats.selectors.message_branch``), sent as one query string:
    one implicit transaction, one commit.

    That commit is asynchronous (``synchronous_commit = off`` for this transaction, unless
    ``settings.TURN_ACCEPT_SYNCHRONOUS_COMMIT``): it does not wait for the WAL to reach
    the disk, a flush that cost 2.3 ms of every turn's start on these machines. The
    turn's two ``pending`` messages become durable with the next synchronous commit of
    the database (the turn's finish waits for the flush of all WAL before its own); a
    database crash before that loses them, and the turn ends as one whose chat was
    deleted meanwhile (PostgreSQL manual, "Asynchronous Commit").

    Returns ``None`` when the statement wrote nothing for a reason it does not tell (the
    ids are in use or sent before, the chat went away meanwhile, the parent is no answer):
    the caller takes the stepwise path (``turn_chat_get``, :func:`turn_accept`), which
    raises the precise error or reports the duplicate.
    """
    if not chat_id or not getattr(user, "is_authenticated", False):
        return AcceptRead(found=None, started=False, branch=selectors.NO_BRANCH)
    sql, params = _accept_read_sql(
        chat_id=chat_id,
        user=user,
        message_id=message_id,
        assistant_message_id=assistant_message_id,
        parent_id=parent_id,
    )
    return _accept_read_run(sql, params, message_id=message_id)


def _accept_read_run(sql: str, params: list[Any], *, message_id: str) -> AcceptRead | None:
    """Send :func:`_accept_read_sql`'s statements and read their answer back, as
    :func:`turn_accept_read` returns it."""
    # Inside a caller's transaction its commit decides, and a savepoint keeps an id clash
    # from aborting it.
    inside = connection.in_atomic_block
    synchronous = settings.TURN_ACCEPT_SYNCHRONOUS_COMMIT or inside
    if not synchronous:
        sql = f"SET LOCAL synchronous_commit = off; {sql}"
    try:
        with (
            transaction.atomic() if inside else contextlib.nullcontext(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, params)
            if not synchronous:
                cursor.nextset()
            row = cursor.fetchone()
            cursor.nextset()
            rows = cursor.fetchall()
    except IntegrityError:
        return None
    found = selectors.turn_chat_row(row[:-1] if row is not None else None)
    if found is None or found.role is None:
        return AcceptRead(found=found, started=False, branch=selectors.NO_BRANCH)
    if not row or not row[-1]:
        return None
    branch = (
        selectors.branch_of(rows, message_id=message_id)
        if found.done_count
        else selectors.NO_BRANCH
    )
    return AcceptRead(found=found, started=True, branch=branch)


def _accept_read_sql(
    *,
    chat_id: str,
    user: Any,
    message_id: str,
    assistant_message_id: str,
    parent_id: str | Parent | None,
) -> tuple[str, list[Any]]:
    """:func:`turn_accept_read`'s two statements (the read and write, then the branch)
    and their parameters."""
    found_sql, params, pk_column = selectors.turn_chat_statement(chat_id=chat_id, user=user)
    target = f"(SELECT {pk_column} FROM found WHERE member_role IS NOT NULL)"  # noqa: S608
    # The guard is on the chat row the write's UPDATE changes (see _turn_messages_sql).
    target += f" AND {connection.ops.quote_name(str(Chat._meta.get_field('mode').column))} = %s"
    target_params: list[Any] = [ChatMode.CLIENT_ENCRYPTED]
    if isinstance(parent_id, str):
        target += _ANSWER_EXISTS
        target_params += [parent_id, chat_id, MessageRole.ASSISTANT]
    specs = [
        (message_id, MessageRole.USER, parent_id),
        (assistant_message_id, MessageRole.ASSISTANT, message_id),
    ]
    bump, insert, write_params = _turn_messages_sql(
        chat_id=chat_id, specs=specs, target=(target, target_params)
    )
    sql = (
        f"WITH found AS ({found_sql}), bumped AS ({bump}), written AS ({insert} RETURNING 1)"  # noqa: S608
        " SELECT found.*, (SELECT COUNT(*) FROM written) FROM found;"
        f" {selectors.branch_sql()}"
    )
    return sql, [*params, *write_params, chat_id]


def _answer_check(*, chat_id: str, message_id: str) -> None:
    """Raise :class:`BadParent` unless ``message_id`` is an assistant message of the chat."""
    role = Message.objects.filter(pk=message_id, chat_id=chat_id).values_list("role", flat=True)
    found = role.first()
    if found != MessageRole.ASSISTANT:
        raise BadParent(f"{message_id} is no answer in chat {chat_id}", missing=found is None)


def _turn_messages_insert(
    *, chat: Chat, specs: Sequence[tuple[str, str, str | Parent | None]]
) -> int:
    """Create messages ``[(id, role, parent id), ...]`` (``pending``), raising the chat's
    version and message count by one per message, in ONE statement: a data-modifying CTE
    (the chat's ``UPDATE … RETURNING version``) feeding the ``INSERT``, which numbers the
    messages' ``chat_version`` from it, as :func:`_messages_create` does in three
    statements and a transaction. A statement is atomic by itself; the ``UPDATE`` runs
    first and takes the chat's row lock (the lock order of :func:`_lock_chat`). A parent
    ``Parent.NEWEST`` is the chat's newest message before the statement (a subquery: the
    statement does not see its own rows), ordered as :func:`_newest_message_id` orders.

    Every column's value comes from the model (its defaults and ``auto_now`` stamps, as
    ``bulk_create`` would write them), cast to the column's type.

    Returns the rows inserted (0: the chat is gone). Raises ``IntegrityError`` when an
    id exists; nothing is written then.
    """
    bump, insert, params = _turn_messages_sql(
        chat_id=chat.pk, specs=specs, target=("%s", [chat.pk])
    )
    with connection.cursor() as cursor:
        cursor.execute(f"WITH bumped AS ({bump}) {insert}", params)
        return int(cursor.rowcount)


def _turn_messages_sql(
    *,
    chat_id: str,
    specs: Sequence[tuple[str, str, str | Parent | None]],
    target: tuple[str, list[Any]],
) -> tuple[str, str, list[Any]]:
    """The two parts of :func:`_turn_messages_insert`'s statement and their parameters:
    the chat's ``UPDATE … RETURNING version`` (of the chat whose key the SQL expression
    ``target[0]`` gives, with parameters ``target[1]``; no row when it is NULL) and the
    ``INSERT … SELECT … FROM bumped`` to put after ``WITH bumped AS (…)``."""
    now = timezone.now()
    quote = connection.ops.quote_name
    chat_fields = {f.name: f for f in Chat._meta.concrete_fields}
    chat_column = {name: quote(str(chat_fields[name].column)) for name in _CHAT_BUMPED}
    chat_pk = quote(str(Chat._meta.pk.column))
    fields = Message._meta.concrete_fields
    params: list[Any] = [len(specs), len(specs), now, now, *target[1]]
    selects = [
        _message_select(chat_id=chat_id, spec=spec, behind=len(specs) - 1 - number, params=params)
        for number, spec in enumerate(specs)
    ]
    version, count = chat_column["version"], chat_column["message_count"]
    bump = (
        f"UPDATE {quote(Chat._meta.db_table)} SET {version} = {version} + %s,"  # noqa: S608
        f" {count} = {count} + %s, {chat_column['last_message_at']} = %s,"
        f" {chat_column['updated_at']} = %s WHERE {chat_pk} = {target[0]}"
        f" RETURNING {version} AS version"
    )
    insert = (
        f"INSERT INTO {quote(Message._meta.db_table)}"
        f" ({', '.join(quote(str(field.column)) for field in fields)})"
        f" {' UNION ALL '.join(selects)}"
    )
    return bump, insert, params


# The guard of :func:`turn_accept_read`'s write on a named parent (its id, the chat's, the
# assistant role): the parent is an answer of the chat.
_ANSWER_EXISTS = (
    f" AND EXISTS (SELECT 1 FROM {connection.ops.quote_name(Message._meta.db_table)} answer"  # noqa: S608
    " WHERE answer.id = %s AND answer.chat_id = %s AND answer.role = %s)"
)
_CHAT_BUMPED = ("version", "message_count", "last_message_at", "updated_at")


def _message_select(
    *, chat_id: str, spec: tuple[str, str, str | Parent | None], behind: int, params: list[Any]
) -> str:
    """The ``SELECT … FROM bumped`` of one message of :func:`_turn_messages_insert`, its
    values appended to ``params``: ``chat_version`` is the bumped version minus
    ``behind`` (the messages after it in the statement), a ``Parent.NEWEST`` parent the
    chat's newest message before the statement."""
    quote = connection.ops.quote_name
    message_id, role, parent = spec
    message = Message(
        id=message_id,
        chat_id=chat_id,
        role=role,
        status=MessageStatus.PENDING,
        parent_id=None if isinstance(parent, Parent) else parent,
    )
    newest = (
        f"(SELECT {quote('id')} FROM {quote(Message._meta.db_table)}"  # noqa: S608
        f" WHERE {quote('chat_id')} = %s"
        f" ORDER BY {quote('created_at')} DESC, {quote('role')}, {quote('id')} DESC LIMIT 1)"
    )
    values = []
    for field in Message._meta.concrete_fields:
        if field.attname == "chat_version":
            values.append(f"bumped.version - {behind}")
            continue
        if field.attname == "parent_id" and isinstance(parent, Parent):
            values.append(newest)
            params.append(chat_id)
            continue
        values.append(f"%s::{_db_type(field)}")
        params.append(field.get_db_prep_save(field.pre_save(message, True), connection))
    # Only the model's own names and types are interpolated; values are parameters.
    return f"SELECT {', '.join(values)} FROM bumped"  # noqa: S608


@functools.cache
def _db_type(field: Field[Any, Any]) -> str:
    """``field``'s column type (``Field.db_type`` builds it anew each call: about 30 µs a
    field, a millisecond of every turn's accept for the message's columns)."""
    return str(field.db_type(connection))


def turn_retry(*, chat: Chat, message_id: str, assistant_message_id: str) -> None:
    """Reopen a turn (``message.retry``): write the user message's status back to
    ``pending`` and a new assistant message (``pending``), one transaction; the chat's
    version rises by two and its message count by one.

    The status is checked under the chat's and the message's row locks, so of two
    retries racing for one message only one reopens it.

    Raises:
        NotFound: no such user message in ``chat``, or the chat is gone.
        NotRetryable: the message's turn did not end failed, interrupted or cancelled.
        IdInUse: ``assistant_message_id`` is taken.
    """
    with transaction.atomic():
        if not _lock_chat(chat.pk):
            raise NotFound(f"chat {chat.pk} not found")
        status = (
            Message.objects.select_for_update()
            .filter(pk=message_id, chat_id=chat.pk, role=MessageRole.USER)
            .values_list("status", flat=True)
            .first()
        )
        if status is None:
            raise NotFound(f"message {message_id} not found in chat {chat.pk}")
        if status not in RETRYABLE_STATUSES:
            raise NotRetryable(f"message {message_id} is {status}", status=status)
        _status_write(chat_id=chat.pk, message_id=message_id, status=MessageStatus.PENDING)
        _answer_add(chat=chat, message_id=message_id, assistant_message_id=assistant_message_id)


def _answer_add(*, chat: Chat, message_id: str, assistant_message_id: str) -> None:
    """A new answer (``pending``) to the user message ``message_id``, a sibling of its
    other answers."""
    try:
        _messages_create(
            chat=chat, specs=[(assistant_message_id, MessageRole.ASSISTANT)], parent_id=message_id
        )
    except IntegrityError as exc:
        raise IdInUse(f"message id {assistant_message_id} is already in use") from exc


def turn_regenerate(*, chat: Chat, message_id: str, assistant_message_id: str) -> str:
    """Answer a question again (``message.regenerate`` of its answer ``message_id``): a
    new assistant message (``pending``) with the same parent as ``message_id``, a sibling
    version beside it, which stays as it is; the question's status stays too. One
    transaction under the chat's row lock; the chat's version and message count rise by
    one. Returns the id of the question.

    Raises:
        NotFound: no such assistant message in ``chat``, or the chat is gone.
        NotRetryable: ``message_id`` is still being answered (``pending`` / ``streaming``),
            or it answers no question (a first message of a server-managed history).
        IdInUse: ``assistant_message_id`` is taken.
    """
    with transaction.atomic():
        if not _lock_chat(chat.pk):
            raise NotFound(f"chat {chat.pk} not found")
        found = (
            Message.objects.filter(pk=message_id, chat_id=chat.pk, role=MessageRole.ASSISTANT)
            .values_list("status", "parent__role", "parent_id")
            .first()
        )
        if found is None:
            raise NotFound(f"answer {message_id} not found in chat {chat.pk}")
        status, parent_role, question_id = found
        if status in UNFINISHED_STATUSES or parent_role != MessageRole.USER:
            raise NotRetryable(f"answer {message_id} is {status}", status=status)
        _answer_add(chat=chat, message_id=question_id, assistant_message_id=assistant_message_id)
    return str(question_id)


def turn_finish(
    *,
    chat: Chat,
    message_id: str,
    assistant_message_id: str,
    status: str,
    content: str,
    reply: str,
    model: str,
    usage: dict[str, int] | None,
    title: str | None = None,
    question_kept: bool = False,
    failure_reason: str = "",
    language: str = "",
    tools_offered: Sequence[str] = (),
) -> None:
    """Finish a turn, one transaction: both messages' final ``status`` (only the reply's
    with ``question_kept``: a regenerated answer's question stays as it was); the reply's
    ``failure_reason`` (a docs/protocol.md §8 code, kept only when ``failed`` or
    ``interrupted``), ``language`` ("" unknown), ``tools_offered`` (names) and, when
    ``reply`` has text, its sealed server copy, ``model`` and ``usage``
    (``{"prompt_tokens", "completion_tokens"}``); the user's ``content`` sealed, in a
    server-managed chat always (with ``title``, when given, as its sealed title), in a
    client-encrypted one only while its client has not stored its own ciphertext. The
    chat's version rises by one per message, which each records. The texts are sealed
    before the transaction opens (a cold data key asks Vault): no row lock waits on Vault.

    Raises:
        ValueError: unknown ``status``.
        NotFound: the chat or one of the messages is gone (deleted meanwhile).
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    Nothing is written when it raises.
    """
    if status not in MessageStatus.values:
        raise ValueError(f"unknown message status {status!r}")
    owner_id = chat.owner_id
    kept_reply = None
    if reply:
        kept_reply = _seal_text(owner_id=owner_id, object_id=assistant_message_id, text=reply)
    # Sealed whether or not the client stored its own copy meanwhile: the update keeps
    # it only where there is none (a seal is microseconds, the check a round trip).
    kept_user = None
    if not question_kept:
        kept_user = _seal_text(owner_id=owner_id, object_id=message_id, text=content)
    kept_title = None
    if chat.mode == ChatMode.SERVER_MANAGED and title:
        kept_title = _seal_text(owner_id=owner_id, object_id=f"{chat.pk}:title", text=title)
    _finish_write(
        chat=chat,
        ids=(message_id, assistant_message_id),
        status=status,
        sealed=(kept_user, kept_reply, kept_title),
        model=model,
        usage=usage,
        question_kept=question_kept,
        failure_reason=failure_reason if status in FAILURE_STATUSES else "",
        language=language,
        tools_offered=tools_offered,
    )


def _finish_write(
    *,
    chat: Chat,
    ids: tuple[str, str],
    status: str,
    sealed: tuple[bytes | None, bytes | None, bytes | None],
    model: str,
    usage: dict[str, int] | None,
    question_kept: bool,
    failure_reason: str,
    language: str = "",
    tools_offered: Sequence[str] = (),
) -> None:
    """:func:`turn_finish`'s transaction: ``ids`` (user message, reply), their ``sealed``
    copies and the title's (``None``: none to keep); with ``question_kept`` the user
    message is left as it is.

    Raises:
        NotFound: the chat or one of the messages is gone (nothing is written then).
    """
    message_id, assistant_message_id = ids
    kept_user, kept_reply, kept_title = sealed
    # Six statements with BEGIN and COMMIT: the chat locked with its version read, one
    # update per message, the chat's new version (the version rises by one per message).
    with transaction.atomic():
        version = _locked_version(chat.pk)
        if version is None:
            raise NotFound(f"chat {chat.pk} not found")
        if not question_kept:
            version += 1
            _user_message_finish(
                chat=chat, message_id=message_id, status=status, sealed=kept_user, version=version
            )
        version += 1
        _reply_finish(
            chat_id=chat.pk,
            message_id=assistant_message_id,
            status=status,
            sealed=kept_reply,
            model=model,
            usage=usage,
            version=version,
            failure_reason=failure_reason,
            language=language,
            tools_offered=tools_offered,
        )
        changes: dict[str, Any] = {"version": version, "updated_at": timezone.now()}
        if kept_title is not None:
            changes["server_title"] = kept_title
        Chat.objects.filter(pk=chat.pk).update(**changes)


def _locked_version(chat_id: str) -> int | None:
    """:func:`_lock_chat` that also reads the chat's version (None: no such chat)."""
    rows = Chat.objects.select_for_update(no_key=True).filter(pk=chat_id).values_list("version")
    found = list(rows)
    return int(found[0][0]) if found else None


def _user_message_finish(
    *, chat: Chat, message_id: str, status: str, sealed: bytes | None, version: int
) -> None:
    """:func:`turn_finish`'s user message, one update (inside its transaction, the chat
    locked): the status with the chat ``version`` it records, and the sealed copy, which
    in a client-encrypted chat only a message without the client's ciphertext takes (a
    ``message.store`` that came first is not overwritten)."""
    changes: dict[str, Any] = {
        "status": status,
        "chat_version": version,
        "updated_at": timezone.now(),
    }
    if sealed is not None and chat.mode == ChatMode.SERVER_MANAGED:
        changes["server_content"] = sealed
    elif sealed is not None:
        changes["server_content"] = Case(
            When(encrypted_content__isnull=True, then=Value(sealed, output_field=BinaryField())),
            default=F("server_content"),
            output_field=BinaryField(),
        )
    if not Message.objects.filter(pk=message_id, chat_id=chat.pk).update(**changes):
        raise NotFound(f"message {message_id} not found in chat {chat.pk}")


def _reply_finish(
    *,
    chat_id: str,
    message_id: str,
    status: str,
    sealed: bytes | None,
    model: str,
    usage: dict[str, int] | None,
    version: int,
    failure_reason: str,
    language: str = "",
    tools_offered: Sequence[str] = (),
) -> None:
    """:func:`turn_finish`'s assistant message, one update (inside its transaction, the
    chat locked): the status, ``failure_reason``, ``language`` (when known) and
    ``tools_offered`` (when any) with the
    chat ``version`` it records and, with ``sealed``, the reply's server copy, model and
    token counts."""
    changes: dict[str, Any] = {
        "status": status,
        "failure_reason": failure_reason,
        "chat_version": version,
        "updated_at": timezone.now(),
    }
    if language:
        changes["language"] = language
    if tools_offered:
        changes["tools_offered"] = list(tools_offered)
    if sealed is not None:
        usage = usage or {}
        changes |= {
            "server_content": sealed,
            "model": model or "",
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": int(usage.get("completion_tokens") or 0),
        }
    if not Message.objects.filter(pk=message_id, chat_id=chat_id).update(**changes):
        raise NotFound(f"message {message_id} not found in chat {chat_id}")


def turn_fail(*, message_id: str, assistant_message_id: str, failure_reason: str = "") -> int:
    """Fail a turn that cannot finish (its process is gone, or it crashed before running):
    write status ``failed`` on whichever of its two messages is still ``pending`` or
    ``streaming``, one transaction, the chat locked first, and on the reply its
    ``failure_reason`` (a reason code of docs/protocol.md §8, "" when none is known); a
    message that is gone or already has its final status is left alone. Returns how many
    messages were failed.
    """
    ids = (message_id, assistant_message_id)
    with transaction.atomic():
        for chat_id in sorted(
            set(Message.objects.filter(pk__in=ids).values_list("chat_id", flat=True))
        ):
            _lock_chat(chat_id)
        unfinished = list(
            Message.objects.select_for_update()
            .filter(pk__in=ids, status__in=UNFINISHED_STATUSES)
            .order_by("pk")
            .values_list("pk", "chat_id")
        )
        for unfinished_id, chat_id in unfinished:
            reason = failure_reason if unfinished_id == assistant_message_id else ""
            _status_write(
                chat_id=chat_id,
                message_id=unfinished_id,
                status=MessageStatus.FAILED,
                failure_reason=reason,
            )
    return len(unfinished)


# --- Embeds --------------------------------------------------------------------------


def embed_create(*, chat: Chat, embed_id: str, tool: str, message_id: str | None = None) -> Embed:
    """Record an embed a tool call creates (status ``processing``).

    Raises:
        IdInUse: ``embed_id`` already exists.
    """
    try:
        with transaction.atomic():
            _lock_chat(chat.pk)
            embed = Embed.objects.create(
                id=embed_id,
                chat=chat,
                message_id=message_id,
                tool=tool,
            )
            _bump_chat(chat.pk)
    except IntegrityError as exc:
        raise IdInUse(f"embed id {embed_id} is already in use") from exc
    return embed


def embed_status_set(*, embed_id: str, status: str) -> None:
    """Set an embed's status (one of :class:`chats.models.EmbedStatus`).

    Raises:
        ValueError: unknown status.  NotFound: no such embed.
    """
    if status not in EmbedStatus.values:
        raise ValueError(f"unknown embed status {status!r}")
    with transaction.atomic():
        chat_id = Embed.objects.filter(pk=embed_id).values_list("chat_id", flat=True).first()
        if chat_id is None:
            raise NotFound(f"embed {embed_id} not found")
        _lock_chat(chat_id)
        Embed.objects.filter(pk=embed_id).update(status=status, updated_at=timezone.now())
        _bump_chat(chat_id)


def embed_store(*, chat: Chat, embed_id: str, encrypted_content: str, version: int) -> Embed:
    """Store the client's ciphertext of an embed (compare-and-set like messages). A
    file's embed takes up to ``FILE_EMBED_CIPHERTEXT_CHARS``, a tool's up to
    ``MAX_MESSAGE_CIPHERTEXT_CHARS`` (``openmates.ids``).

    Raises:
        NotFound: no such embed in ``chat``.  VersionConflict: stale ``version``.
        ValueError: the ciphertext is longer than the embed's kind allows.
        ReadOnlyChat: ``chat`` is server-managed.
    """
    _writable_check(chat)
    with transaction.atomic():
        _lock_chat(chat.pk)
        embed = Embed.objects.select_for_update().filter(pk=embed_id, chat_id=chat.pk).first()
        if embed is None:
            raise NotFound(f"embed {embed_id} not found in chat {chat.pk}")
        limit = (
            FILE_EMBED_CIPHERTEXT_CHARS
            if embed.tool == FILE_EMBED_TOOL
            else MAX_MESSAGE_CIPHERTEXT_CHARS
        )
        if len(encrypted_content) > limit:
            raise ValueError(f"encrypted_content is longer than {limit} characters")
        if embed.version == version + 1 and embed.encrypted_content == encrypted_content:
            return embed
        if embed.version != version:
            raise VersionConflict(
                f"embed {embed_id} is at version {embed.version}, not {version}",
                current_version=embed.version,
            )
        embed.encrypted_content = encrypted_content
        embed.version = version + 1
        embed.save()
        _bump_chat(chat.pk)
    return embed


def file_embeds_create(*, chat: Chat, message_id: str, embed_ids: Sequence[str]) -> None:
    """The embeds of the files sent with user message ``message_id``: one ``Embed`` per
    id (tool ``file``, status finished, no ciphertext until the client stores it,
    docs/protocol.md §13). Ids already this message's file embeds are kept as they are;
    call it in the transaction that accepts the message.

    Raises:
        IdInUse: an id names another embed (of another message, chat or user).
    """
    if not embed_ids:
        return
    existing = list(Embed.objects.filter(pk__in=embed_ids))
    for embed in existing:
        if (embed.chat_id, embed.message_id, embed.tool) != (chat.pk, message_id, FILE_EMBED_TOOL):
            raise IdInUse(f"embed {embed.pk} is in use")
    known = {embed.pk for embed in existing}
    try:
        with transaction.atomic():
            Embed.objects.bulk_create(
                Embed(
                    id=embed_id,
                    chat_id=chat.pk,
                    message_id=message_id,
                    tool=FILE_EMBED_TOOL,
                    status=EmbedStatus.FINISHED,
                )
                for embed_id in embed_ids
                if embed_id not in known
            )
    except IntegrityError:
        raise IdInUse("an embed id is in use") from None


# --- User keys and the account -------------------------------------------------------


PBKDF2_MIN_ITERATIONS = 600_000
ARGON2_MIN_MEMORY_KIB = 64 * 1024
ARGON2_MIN_TIME = 3
KDF_MIN_SALT_BYTES = 16


def kdf_check(kdf: dict[str, Any]) -> None:
    """Refuse KDF parameters below docs/crypto.md §2's floor (the client refuses them too).

    Accepts ``{"name": "PBKDF2", "hash": "SHA-256", "iterations" >= 600000, "salt": b64
    of >= 16 bytes, ...}`` or ``{"name": "Argon2id", "memory_kib" >= 65536, "time" >= 3,
    "salt": ...}``.

    Raises:
        ValueError: naming what is missing or too weak.
    """
    try:
        salt = base64.b64decode(str(kdf.get("salt", "")), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("kdf.salt must be base64") from None
    if len(salt) < KDF_MIN_SALT_BYTES:
        raise ValueError(f"kdf.salt needs at least {KDF_MIN_SALT_BYTES} bytes")
    name = kdf.get("name")
    if name == "PBKDF2":
        if kdf.get("hash") != "SHA-256":
            raise ValueError("PBKDF2 must use SHA-256")
        iterations = kdf.get("iterations")
        if not isinstance(iterations, int) or iterations < PBKDF2_MIN_ITERATIONS:
            raise ValueError(f"PBKDF2 needs at least {PBKDF2_MIN_ITERATIONS} iterations")
        return
    if name == "Argon2id":
        memory, rounds = kdf.get("memory_kib"), kdf.get("time")
        if not isinstance(memory, int) or memory < ARGON2_MIN_MEMORY_KIB:
            raise ValueError(f"Argon2id needs at least {ARGON2_MIN_MEMORY_KIB} KiB of memory")
        if not isinstance(rounds, int) or rounds < ARGON2_MIN_TIME:
            raise ValueError(f"Argon2id needs at least {ARGON2_MIN_TIME} passes")
        return
    raise ValueError("kdf.name must be PBKDF2 or Argon2id")


def user_keys_set(
    *,
    user: Any,
    wrapped_master_key: str,
    recovery_wrapped_master_key: str,
    master_key_id: str,
    recovery_key_id: str,
    kdf: dict[str, Any],
    version: int | None = None,
) -> UserKeys:
    """Create or replace the user's wrapped keys (compare-and-set when ``version`` given).

    ``version`` is the version the replacement is based on (a passphrase change);
    ``None`` creates the first set. Ensures the user's transit key ``user-<id>`` exists
    first (users made by ``createsuperuser`` or the admin have none until here), so the
    server can seal their kept replies and caches once their keys are set.

    Raises:
        ValueError: ``kdf`` is below the floor (:func:`kdf_check`).
        VersionConflict: keys exist and ``version`` is missing or stale.
        openmates.vault.VaultError: Vault refused or is unreachable; nothing was stored.
    """
    kdf_check(kdf)
    user_transit_key_ensure(user_id=user.pk)
    fields = {
        "wrapped_master_key": wrapped_master_key,
        "recovery_wrapped_master_key": recovery_wrapped_master_key,
        "master_key_id": master_key_id,
        "recovery_key_id": recovery_key_id,
        "kdf": kdf,
    }
    with transaction.atomic():
        keys = UserKeys.objects.select_for_update().filter(user=user).first()
        if keys is None:
            return UserKeys.objects.create(user=user, **fields)
        if version != keys.version:
            raise VersionConflict(
                f"user keys are at version {keys.version}", current_version=keys.version
            )
        for name, value in fields.items():
            setattr(keys, name, value)
        keys.version += 1
        keys.save()
    return keys


def user_sealed_rewrap(*, user_id: int) -> int:
    """After a rotation of ``user-<id>``: rewrap the data keys of the user's sealed rows.

    Covers kept replies and server-managed messages (``Message.server_content``) and
    server-managed titles (``Chat.server_title``); values already wrapped by the latest
    key version are skipped. The plaintext never leaves Vault's rewrap. Returns how many
    values were rewrapped. (The Redis caches are short-lived and need no rewrap: old key
    versions keep decrypting until their minimum decryption version is raised.)

    Raises:
        openmates.vault.VaultError: Vault refused or is unreachable.
    """
    key_name = vault.user_key_name(user_id)
    latest = vault.key_latest_version(key_name)
    done = 0
    messages = Message.objects.filter(chat__owner_id=user_id, server_content__isnull=False)
    for message_id, sealed in messages.values_list("pk", "server_content").iterator():
        fresh = _rewrapped(key_name, latest, sealed)
        if fresh is not None:
            done += Message.objects.filter(pk=message_id, server_content=sealed).update(
                server_content=fresh
            )
    chats = Chat.objects.filter(owner_id=user_id, server_title__isnull=False)
    for chat_id, sealed in chats.values_list("pk", "server_title").iterator():
        fresh = _rewrapped(key_name, latest, sealed)
        if fresh is not None:
            done += Chat.objects.filter(pk=chat_id, server_title=sealed).update(server_title=fresh)
    return done


def _rewrapped(key_name: str, latest: int, sealed: Any) -> bytes | None:
    """``sealed`` rewrapped under the latest key version, or None when it already is."""
    raw = bytes(sealed)
    if crypto.sealed_key_version(raw) >= latest:
        return None
    return crypto.rewrap_sealed(key_name, raw)


def user_transit_key_ensure(*, user_id: int | str) -> None:
    """Create the user's named transit key ``user-<id>`` (idempotent; admin token)."""
    vault.ensure_key(vault.user_key_name(user_id))


def account_data_delete(*, user_id: int) -> None:
    """The chats part of deleting an account (called by ``accounts.services.account_delete``
    inside its transaction, after the user's transit key is gone).

    Drops the user's cache entries (AI, sync and embed caches, consents, the pipeline's
    chat notes and the kept texts of unanswered messages) and locks the user's chats in
    the lock order (chat first), so the cascade from the user row then locks the rest.
    """
    chat_ids = list(
        Chat.objects.select_for_update(no_key=True)
        .filter(owner_id=user_id)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    unanswered = list(
        Message.objects.filter(chat__owner_id=user_id, role=MessageRole.USER)
        .exclude(status=MessageStatus.DONE)
        .values_list("id", flat=True)
    )
    removed = cache.prune(user_id=user_id, chat_ids=chat_ids, message_ids=unanswered)
    logger.info("account %s: %d cache entries removed", user_id, removed)


class ChatsAccountData:
    """The chats app's part in account deletion (``accounts.deletion``)."""

    name = "chats"

    def account_data_delete(self, *, user_id: int) -> None:
        """See :func:`account_data_delete`."""
        account_data_delete(user_id=user_id)
