"""Reads for chats and messages (STYLE.md: selectors return ``None`` for "not yours")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import Col

from chats.models import Chat, Embed, Message, MessageRole, MessageStatus, UserKeys
from instances.models import Instance, InstanceMember


def chat_get_for_user(*, chat_id: str, user: Any) -> Chat | None:
    """The chat ``chat_id`` when ``user`` owns it, else ``None`` (also for unknown ids).

    The instance is loaded with it, so async callers may read ``chat.instance``.
    """
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    return Chat.objects.select_related("instance").filter(pk=chat_id, owner_id=user.pk).first()


def chat_owned_in_instance(user_id: int, instance_id: int, chat_id: str) -> bool:
    """Whether ``chat_id`` is a chat of ``user_id`` in ``instance_id`` (a memory's source
    chat must be, ``memories.services.source_chat_check_set``)."""
    return Chat.objects.filter(pk=chat_id, owner_id=user_id, instance_id=instance_id).exists()


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


@dataclass(frozen=True, slots=True)
class _RowShape:
    """A model's concrete fields as a raw SELECT lists them, with the converters Django's
    compiler would apply to each column (the backend's, then the field's)."""

    model: Any
    alias: str
    attnames: tuple[str, ...]
    converters: tuple[tuple[Callable[..., Any], ...], ...]
    columns: tuple[Col, ...]

    @classmethod
    def of(cls, model: Any, alias: str) -> _RowShape:
        fields = model._meta.concrete_fields
        columns = tuple(field.get_col(alias) for field in fields)
        return cls(
            model=model,
            alias=alias,
            attnames=tuple(field.attname for field in fields),
            converters=tuple(
                tuple(connection.ops.get_db_converters(col) + col.get_db_converters(connection))
                for col in columns
            ),
            columns=columns,
        )

    def select(self) -> list[str]:
        quote = connection.ops.quote_name
        return [f"{self.alias}.{quote(str(col.target.column))}" for col in self.columns]

    def build(self, values: Sequence[Any]) -> Any:
        """The model instance of one row's ``values`` (this shape's columns, in order)."""
        converted = []
        for value, converters, col in zip(values, self.converters, self.columns, strict=True):
            for converter in converters:
                value = converter(value, col, connection)
            converted.append(value)
        return self.model.from_db(connection.alias, self.attnames, converted)


@functools.cache
def _turn_chat_query() -> tuple[str, _RowShape, _RowShape]:
    """:func:`turn_chat_get`'s statement and its row's two model shapes. Only the models'
    table and column names are formatted in; every value is a parameter. The columns are
    named ``c0``, ``c1``, … in row order (the chat's, then its instance's), then
    ``member_role`` and ``done_count``, so the statement can serve as a CTE
    (``chats.services.turn_accept_read``)."""
    quote = connection.ops.quote_name
    chat, instance = _RowShape.of(Chat, "chat"), _RowShape.of(Instance, "instance")
    pk, instance_id = quote(str(Chat._meta.pk.column)), quote("instance_id")
    columns = [f"{column} AS c{n}" for n, column in enumerate(chat.select() + instance.select())]
    sql = (
        f"SELECT {', '.join(columns)},"  # noqa: S608
        f" (SELECT member.role FROM {_table(InstanceMember)} member"
        f" WHERE member.instance_id = chat.{instance_id} AND member.user_id = %s LIMIT 1)"
        " AS member_role,"
        f" (SELECT COUNT(*) FROM {_table(Message)} done"
        f" WHERE done.chat_id = chat.{pk} AND done.status = %s) AS done_count"
        f" FROM {_table(Chat)} chat"
        f" JOIN {_table(Instance)} instance"
        f" ON instance.{quote(str(Instance._meta.pk.column))} = chat.{instance_id}"
        f" WHERE chat.{pk} = %s AND chat.{quote('owner_id')} = %s"
    )
    return sql, chat, instance


def turn_chat_statement(*, chat_id: str, user: Any) -> tuple[str, list[Any], str]:
    """:func:`turn_chat_get`'s statement, its parameters, and the name of the column that
    holds the chat's primary key (for a caller that runs it as a CTE and reads the row
    back with :func:`turn_chat_row`)."""
    sql, chat, _instance = _turn_chat_query()
    pk_index = chat.attnames.index(str(Chat._meta.pk.attname))
    return sql, [user.pk, MessageStatus.DONE, chat_id, user.pk], f"c{pk_index}"


def turn_chat_row(row: Sequence[Any] | None) -> TurnChat | None:
    """The :class:`TurnChat` of one row of :func:`turn_chat_statement` (``None``: none)."""
    if row is None:
        return None
    _sql, chat_shape, instance_shape = _turn_chat_query()
    split = len(chat_shape.attnames)
    chat = chat_shape.build(row[:split])
    instance = instance_shape.build(row[split:-2])
    Chat._meta.get_field("instance").set_cached_value(chat, instance)
    role, done = row[-2], row[-1]
    return TurnChat(chat=chat, role=role, done_count=int(done))


def turn_chat_get(*, chat_id: str, user: Any) -> TurnChat | None:
    """The chat ``chat_id`` when ``user`` owns it, with its instance, the user's role in
    that instance and its done-message count, in one query; ``None`` as
    :func:`chat_get_for_user`.

    Written as SQL, not a QuerySet: building and compiling the ORM's query cost about
    1.5 ms of Python on every turn's start, on a database thread that holds the GIL the
    event loop needs; the rows become models as the ORM would make them
    (``Model.from_db`` after the same converters)."""
    if not chat_id or not getattr(user, "is_authenticated", False):
        return None
    sql, params, _pk = turn_chat_statement(chat_id=chat_id, user=user)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return turn_chat_row(cursor.fetchone())


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


# The branch of a question in a chat with no done message: nothing before it.
NO_BRANCH = Branch(path=(), off_branch=frozenset())


@functools.cache
def branch_sql() -> str:
    """The statement (one parameter: the chat's id) whose rows :func:`branch_of` walks."""
    quote = connection.ops.quote_name
    return (
        f"SELECT {quote('id')}, {quote('parent_id')}, {quote('status')}"  # noqa: S608
        f" FROM {_table(Message)} WHERE {quote('chat_id')} = %s"
    )


def message_branch(*, chat_id: str, message_id: str) -> Branch:
    """The :class:`Branch` of the question ``message_id`` (one query over the chat's
    message ids and parents)."""
    with connection.cursor() as cursor:
        # SQL, not values_list(): this runs on every turn's start (compiling the QuerySet
        # cost more than the statement itself).
        cursor.execute(branch_sql(), [chat_id])
        return branch_of(cursor.fetchall(), message_id=message_id)


def branch_of(found: Sequence[Sequence[Any]], *, message_id: str) -> Branch:
    """The :class:`Branch` of the question ``message_id`` from the chat's ``(id,
    parent_id, status)`` rows (:func:`branch_sql`); a cycle, which the services never
    write, ends the walk."""
    rows = {pk: (parent, status) for pk, parent, status in found}
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
