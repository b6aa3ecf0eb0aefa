"""Reads for chats and messages (STYLE.md: selectors return ``None`` for "not yours")."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from chats.models import Chat, Embed, Message, MessageRole, MessageStatus, UserKeys


def chat_get_for_user(*, chat_id: str, user: Any) -> Chat | None:
    """The chat ``chat_id`` when ``user`` owns it, else ``None`` (also for unknown ids).

    The instance is loaded with it, so async callers may read ``chat.instance``.
    """
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    return Chat.objects.select_related("instance").filter(pk=chat_id, owner_id=user.pk).first()


async def achat_get_for_user(*, chat_id: str, user: Any) -> Chat | None:
    """Async twin of :func:`chat_get_for_user`."""
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    return await (
        Chat.objects.select_related("instance").filter(pk=chat_id, owner_id=user.pk).afirst()
    )


def chat_list_for_user(*, user: Any) -> QuerySet[Chat]:
    """The user's chats, most recently changed first."""
    return (
        Chat.objects.select_related("instance")
        .filter(owner_id=user.pk)
        .order_by("-updated_at", "-pk")
    )


def messages_since(*, chat: Chat, version: int = 0) -> QuerySet[Message]:
    """Messages of ``chat`` changed after the chat was at ``version`` (oldest first)."""
    return Message.objects.filter(chat_id=chat.pk, chat_version__gt=version).order_by(
        "created_at", "pk"
    )


def chat_done_message_count(*, chat_id: str) -> int:
    """How many messages of the chat are ``done`` (what a complete AI cache must hold)."""
    return Message.objects.filter(chat_id=chat_id, status=MessageStatus.DONE).count()


async def auser_message_status(*, chat_id: str, message_id: str) -> str | None:
    """The status of the user message ``message_id`` of chat ``chat_id``, or ``None`` when
    the chat has no such user message."""
    return await (
        Message.objects.filter(pk=message_id, chat_id=chat_id, role=MessageRole.USER)
        .values_list("status", flat=True)
        .afirst()
    )


async def aembed_chat_id_for_user(*, embed_id: str, user_id: int) -> str | None:
    """The chat of embed ``embed_id`` when one of ``user_id``'s chats holds it, else ``None``."""
    return await (
        Embed.objects.filter(pk=embed_id, chat__owner_id=user_id)
        .values_list("chat_id", flat=True)
        .afirst()
    )


def user_keys_get(*, user: Any) -> UserKeys | None:
    """The user's wrapped browser keys, or ``None`` before encryption is set up."""
    return UserKeys.objects.filter(user_id=user.pk).first()
