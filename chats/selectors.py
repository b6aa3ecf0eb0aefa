"""Reads for chats and messages (STYLE.md: selectors return ``None`` for "not yours")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import CharField, IntegerField, QuerySet
from django.db.models.expressions import RawSQL

from chats.models import Chat, Embed, Message, MessageRole, MessageStatus, UserKeys
from instances.models import InstanceMember


def chat_get_for_user(*, chat_id: str, user: Any) -> Chat | None:
    """The chat ``chat_id`` when ``user`` owns it, else ``None`` (also for unknown ids).

    The instance is loaded with it, so async callers may read ``chat.instance``.
    """
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    return Chat.objects.select_related("instance").filter(pk=chat_id, owner_id=user.pk).first()


def chat_mode_for_user(*, chat_id: str, user_id: int) -> str | None:
    """The ``ChatMode`` of the chat ``chat_id`` when ``user_id`` owns it, else ``None``."""
    found = Chat.objects.filter(pk=chat_id, owner_id=user_id).values_list("mode", flat=True)
    return found.first()


async def achat_get_for_user(*, chat_id: str, user: Any) -> Chat | None:
    """Async twin of :func:`chat_get_for_user`."""
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    return await (
        Chat.objects.select_related("instance").filter(pk=chat_id, owner_id=user.pk).afirst()
    )


@dataclass(frozen=True, slots=True)
class TurnChat:
    """A chat as a turn's start needs it: ``chat`` (its instance loaded with it), the
    user's ``role`` in that instance now (``None``: no longer a member) and
    ``done_count``, how many of its messages are ``done`` (what a complete AI cache holds).
    """

    chat: Chat
    role: str | None
    done_count: int


def _table(model: Any) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# Correlated with the outer query's chat row (Django names it by its table); only table
# names from the models are formatted in, every value is a parameter.
_MEMBER_ROLE_SQL = (
    f"SELECT member.role FROM {_table(InstanceMember)} member"  # noqa: S608
    f" WHERE member.instance_id = {_table(Chat)}.instance_id AND member.user_id = %s LIMIT 1"
)
_DONE_COUNT_SQL = (
    f"SELECT COUNT(*) FROM {_table(Message)} done"  # noqa: S608
    f" WHERE done.chat_id = {_table(Chat)}.id AND done.status = %s"
)


def _turn_chat_annotations(user_id: int) -> tuple[RawSQL, RawSQL]:
    # RawSQL, not Subquery/Coalesce/GROUP BY: those took three times as long to build and
    # compile (~1.3 ms of Python of every turn's start, on a database thread holding the GIL).
    role = RawSQL(_MEMBER_ROLE_SQL, (user_id,), output_field=CharField())  # noqa: S611
    done = RawSQL(_DONE_COUNT_SQL, (MessageStatus.DONE,), output_field=IntegerField())  # noqa: S611
    return role, done


def turn_chat_get(*, chat_id: str, user: Any) -> TurnChat | None:
    """The chat ``chat_id`` when ``user`` owns it, with the user's role in its instance
    and its done-message count, in one query; ``None`` as :func:`chat_get_for_user`."""
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    role, done = _turn_chat_annotations(user.pk)
    chat = (
        Chat.objects.select_related("instance")
        .filter(pk=chat_id, owner_id=user.pk)
        .annotate(member_role=role, done_messages=done)
        .first()
    )
    if chat is None:
        return None
    return TurnChat(chat=chat, role=chat.member_role, done_count=int(chat.done_messages))


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


@dataclass(frozen=True)
class Branch:
    """The branch a question continues (docs/architecture.md §3): ``path``, the ``done``
    messages from the chat's first message to the question's parent, oldest first (what
    the model is given before the question); ``off_branch``, every other message of the
    chat (earlier versions, other branches, the question itself, which the model gets as
    the question: none of them is history).
    """

    path: tuple[str, ...]
    off_branch: frozenset[str]


def message_branch(*, chat_id: str, message_id: str) -> Branch:
    """The :class:`Branch` of the question ``message_id`` (one query over the chat's
    message ids and parents; a cycle, which the services never write, ends the walk)."""
    rows = {
        pk: (parent, status)
        for pk, parent, status in Message.objects.filter(chat_id=chat_id).values_list(
            "pk", "parent_id", "status"
        )
    }
    on_path: list[str] = []
    # A set beside the list keeps the walk linear in the chat's length (a long chat's
    # path holds every message; a membership test on the list made each turn quadratic).
    seen: set[str] = set()
    step = rows.get(message_id, (None, ""))[0]
    while step is not None and step in rows and step not in seen:
        on_path.append(step)
        seen.add(step)
        step = rows[step][0]
    done = tuple(pk for pk in reversed(on_path) if rows[pk][1] == MessageStatus.DONE)
    return Branch(path=done, off_branch=frozenset(rows.keys() - seen))


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


def chat_embeds(*, chat_id: str) -> list[Embed]:
    """The embeds of chat ``chat_id`` (the caller checked it is the user's), oldest first,
    without their ciphertext loaded."""
    return list(Embed.objects.filter(chat_id=chat_id).defer("encrypted_content").order_by("pk"))


def chat_embed(*, chat_id: str, embed_id: str) -> Embed | None:
    """Embed ``embed_id`` of chat ``chat_id``, or ``None`` when the chat has no such embed."""
    return Embed.objects.filter(pk=embed_id, chat_id=chat_id).first()


def user_keys_get(*, user: Any) -> UserKeys | None:
    """The user's wrapped browser keys, or ``None`` before encryption is set up."""
    return UserKeys.objects.filter(user_id=user.pk).first()
