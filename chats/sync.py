"""Answering ``sync.request`` in the three phases of docs/protocol.md §4.

Only chats whose ``version`` differs from what the client says it holds (``known``) are
sent, newest first: phase 1 is the most recently changed of them in full, phase 2 the
next 19 with metadata and messages, phase 3 the metadata of up to 100 more.

Messages come from the sync cache (client ciphertext, 1 h) when it holds the chat at its
current version, else from PostgreSQL (and are cached for the next sign-in). A reply no
client has stored yet is opened from its server-encrypted copy and sent as plaintext
``content`` with ``needs_store: true`` so the client encrypts and stores it; that
plaintext is never cached.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from chats import cache
from chats.models import Chat, ChatMode, Message
from chats.services import sealed_text_open
from openmates import crypto

logger = logging.getLogger(__name__)

PHASE_1_CHATS = 1
PHASE_2_CHATS = 19
PHASE_3_CHATS = 100


def server_title(chat: Chat) -> str | None:
    """A server-managed chat's title, opened (None: it has none yet, or it does not open)."""
    if chat.server_title is None:
        return None
    try:
        return sealed_text_open(
            owner_id=chat.owner_id, object_id=f"{chat.pk}:title", sealed=chat.server_title
        )
    except crypto.DecryptionError:
        return None


def chat_metadata(chat: Chat) -> dict[str, Any]:
    """A chat object as the client receives it (ciphertext fields, plaintext metadata; a
    server-managed chat's ``title`` opened, since no client holds a key for it)."""
    item: dict[str, Any] = {
        "chat_id": chat.pk,
        "instance": chat.instance.slug,
        "mode": chat.mode,
        "version": chat.version,
        "meta_version": chat.meta_version,
        "encrypted_chat_key": chat.encrypted_chat_key,
        "encrypted_title": chat.encrypted_title,
        "encrypted_summary": chat.encrypted_summary,
        "encrypted_tags": chat.encrypted_tags,
        "encrypted_category": chat.encrypted_category,
        "encrypted_icon": chat.encrypted_icon,
        "pinned": chat.pinned,
        "message_count": chat.message_count,
        "created_at": chat.created_at.isoformat(),
        "updated_at": chat.updated_at.isoformat(),
        # Its last message's time (its creation before one): what a chat list sorts by, so
        # a rename, a title or a summary does not move a chat.
        "last_message_at": (chat.last_message_at or chat.created_at).isoformat(),
    }
    if chat.mode == ChatMode.SERVER_MANAGED:
        item["title"] = server_title(chat)
    return item


def message_metadata(message: Message) -> dict[str, Any]:
    """A message as the sync cache and the client hold it: ciphertext, no plaintext."""
    return {
        "message_id": message.pk,
        "role": message.role,
        "parent_id": message.parent_id,
        "status": message.status,
        "version": message.version,
        "encrypted_content": message.encrypted_content,
        "pending_server_copy": message.server_content is not None,
        "model": message.model,
        # Why a failed or interrupted answer ended (docs/protocol.md §8), else None.
        "failure_reason": message.failure_reason or None,
        # The language the answer was given in (docs/protocol.md §6), else None.
        "language": message.language or None,
        # The names of the tools the answer's model was offered (docs/protocol.md §6).
        "tools_offered": list(message.tools_offered or ()),
        "created_at": message.created_at.isoformat(),
    }


def _server_copies(chat: Chat, message_ids: list[str]) -> dict[str, str]:
    """Open the server-encrypted copies of ``message_ids`` (skipping undecryptable ones)."""
    copies: dict[str, str] = {}
    rows = Message.objects.filter(pk__in=message_ids).values_list("pk", "server_content")
    for message_id, sealed in rows:
        if sealed is None:
            continue
        try:
            copies[message_id] = sealed_text_open(
                owner_id=chat.owner_id, object_id=message_id, sealed=sealed
            )
        except crypto.DecryptionError:
            logger.warning("server copy of message %s no longer decrypts", message_id)
    return copies


def chat_messages_for_sync(chat: Chat) -> list[dict[str, Any]]:
    """The chat's messages for the client: sync cache first, PostgreSQL after."""
    messages = cache.sync_cache_get(user_id=chat.owner_id, chat_id=chat.pk, version=chat.version)
    if messages is None:
        messages = [message_metadata(m) for m in Message.objects.filter(chat_id=chat.pk)]
        cache.sync_cache_put(
            user_id=chat.owner_id, chat_id=chat.pk, version=chat.version, messages=messages
        )
    return with_server_copies(chat, messages)


def with_server_copies(chat: Chat, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (from :func:`message_metadata`) with kept replies opened for the owner.

    A message with a server-encrypted copy gets ``content`` (plaintext) and, in a
    client-encrypted chat, ``needs_store: true``. The input list is not changed.
    """
    waiting = [m["message_id"] for m in messages if m["pending_server_copy"]]
    if not waiting:
        return messages
    copies = _server_copies(chat, waiting)
    answer = []
    for message in messages:
        if message["message_id"] in copies:
            message = {**message, "content": copies[message["message_id"]]}
            if chat.mode == ChatMode.CLIENT_ENCRYPTED:
                message["needs_store"] = True
        answer.append(message)
    return answer


def sync_phases(*, user: Any, known: dict[str, int]) -> list[list[dict[str, Any]]]:
    """The three ``sync.phase`` chat lists for ``user``.

    ``known`` maps chat id → the version the client holds. Returns ``[phase1, phase2,
    phase3]``; chats in phases 1-2 carry ``messages``. Server-managed chats carry their
    opened ``title`` too.
    """
    limit = PHASE_1_CHATS + PHASE_2_CHATS + PHASE_3_CHATS
    rows = (
        Chat.objects.select_related("instance")
        .filter(owner_id=user.pk)
        .order_by("-updated_at", "-pk")
        .iterator(chunk_size=200)
    )
    # Positions count changed chats only: phase 1 is the newest chat the client lacks.
    chats = [chat for chat in rows if known.get(chat.pk) != chat.version]
    phases: list[list[dict[str, Any]]] = [[], [], []]
    for position, chat in enumerate(chats[:limit]):
        phase = (
            0 if position < PHASE_1_CHATS else 1 if position < PHASE_1_CHATS + PHASE_2_CHATS else 2
        )
        item = chat_metadata(chat)
        if phase < 2:
            item["messages"] = chat_messages_for_sync(chat)
        phases[phase].append(item)
    return phases


def chats_gone(*, user: Any, known: dict[str, int]) -> list[str]:
    """The ids of ``known`` (the chats a client holds) that are no chat of ``user`` now:
    deleted while the client was away, or never the user's. Sorted; ``sync.done`` carries
    them as ``deleted`` and the client drops them (docs/protocol.md §4)."""
    if not known:
        return []
    held = set(
        Chat.objects.filter(owner_id=user.pk, pk__in=list(known)).values_list("pk", flat=True)
    )
    return sorted(chat_id for chat_id in known if chat_id not in held)


def sync_total_chats(*, user: Any) -> int:
    """``sync.done``'s ``total_chats``: how many chats the user has."""
    return Chat.objects.filter(owner_id=user.pk).count()


# The a-prefixed async twins (STYLE.md naming): one thread hop for the whole answer.
async_phases = sync_to_async(sync_phases)
async_total_chats = sync_to_async(sync_total_chats)
