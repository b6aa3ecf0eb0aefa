"""Server-managed turns: the instance's whole pipeline for a conversation the server keeps.

The one interface through which programs talk to an instance without a browser
(``/v1/chat/completions``, ``manage.py chat``, chat-channel adapters such as Telegram or
Slack; docs/api.md §6). The conversation is a ``server_managed`` chat of the given user
(a real user, or the pseudo-user of an API key or a channel): its messages are sealed
under that user's transit key, and every message runs through ``pipeline.turn.run_turn``
— pre-processing, the main model with tools, post-processing — as on the WebSocket.

Use::

    turn = await server_turn_start(ServerTurnInput(
        instance=instance, user_id=user.pk, role="member",
        conversation_id=None,            # or an earlier turn's ``turn.conversation_id``
        text="Hello",
    ))
    async for event in turn.events():    # pipeline.events: ReplyDelta, SkillStatus,
        ...                              # Error, StreamDone, PostprocessDone
    # or: done = await turn.run_to_end()  (the final StreamDone; done.content is the text)

The turn runs in this process's turn registry (``pipeline.runtime``, docs/architecture.md
§5), as a browser's turn does: it takes the conversation's lease, or waits in its queue
behind the turn already running there (two requests on one conversation never
interleave), and the registry's heartbeat vouches for it, so when its process dies the
reaper (in any live process) ends its messages ``failed``. A consumer that stops reading
(a client that disconnected) calls ``turn.cancel()`` or just closes the ``events()``
generator, and the turn ends ``cancelled`` with its messages' statuses written. The
history comes from the AI cache; when the cache lacks it (evicted, expired) the runner
answers the turn's ``request_chat_history`` itself from the sealed server copies in
PostgreSQL, so a server-managed turn never waits for a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from chats import cache as chat_cache
from chats import notify as chat_notify
from chats import services as chat_services
from chats.models import Chat, ChatMode, Message, MessageRole, MessageStatus
from instances.models import Instance
from openmates import llm
from pipeline import events as ev
from pipeline import state, warm_up
from pipeline.actions import user_key_ensure
from pipeline.db import db_call
from pipeline.files import TurnFile
from pipeline.ids import new_id
from pipeline.runtime import TurnControl, TurnRegistry, registry
from pipeline.turn import TurnRequest, run_turn

_HISTORY_ROLES = (MessageRole.USER, MessageRole.ASSISTANT)


class ConversationNotFoundError(LookupError):
    """No server-managed conversation with this id belongs to the user in the instance."""


@dataclass(frozen=True)
class ServerTurnInput:
    """What a server-managed turn takes.

    ``user_id``: whose conversation and memories (never chosen by a client-supplied
    name). ``role``: the user's role in the instance (``member`` for pseudo-users).
    ``conversation_id``: an existing conversation to continue, or None for a new one,
    seeded with ``history`` (``[{"role": "user"|"assistant", "content": str}]``, oldest
    first; other roles are left out: the instance's own prompt is the system prompt).
    ``options``: the client's ``temperature`` / ``max_tokens`` / ``stop`` for the main call.
    ``files``: files of the new message, read (``pipeline.files.turn_file``; images reach
    a model that sees them as ``image_url`` parts, as a browser's do). ``tier``: the tier
    to answer on (within ``role``'s tiers), or None for pre-processing's choice.
    ``end_user``: the client's name for its end user (OpenAI's ``user``; at most 256
    characters, sanitised), recorded on the user message (``Message.end_user``) and
    never used to choose whose data the turn reads.
    """

    instance: Instance
    user_id: int
    role: str
    text: str
    conversation_id: str | None = None
    history: Sequence[Mapping[str, str]] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    files: Sequence[TurnFile] = ()
    tier: str | None = None
    end_user: str = ""


@dataclass(eq=False)
class ServerTurn:
    """A started turn: its ids, its events, and a way to cancel it."""

    instance: Instance
    conversation_id: str
    message_id: str
    reply_id: str
    control: TurnControl
    _queue: asyncio.Queue[ev.ServerEvent | None]
    _task: asyncio.Task[None] | None = None
    final: ev.StreamDone | None = None

    def cancel(self) -> None:
        """End the turn as ``cancelled``, as ``task.cancel`` does on the WebSocket (no
        effect once the turn is writing its outcome)."""
        if self.control.finishing or self.control.cancel.is_set():
            return
        self.control.cancel.set()
        if self._task is not None:
            self._task.cancel()

    async def events(self, *, until_done: bool = False) -> AsyncIterator[ev.ServerEvent]:
        """The turn's events until its last. With ``until_done`` the iteration ends after
        ``StreamDone`` while post-processing goes on in the background. Closing this
        generator before ``StreamDone`` cancels the turn."""
        answered = False
        try:
            while (event := await self._queue.get()) is not None:
                if isinstance(event, ev.StreamDone):
                    self.final, answered = event, True
                yield event
                if answered and until_done:
                    return
        finally:
            if not answered:
                self.cancel()

    async def run_to_end(self, *, until_done: bool = False) -> ev.StreamDone:
        """Consume the events (up to ``StreamDone`` with ``until_done``); the turn's
        ``StreamDone`` (status, content, usage)."""
        async for _ in self.events(until_done=until_done):
            pass
        if self.final is None:  # run_turn always ends with one; a crash is re-raised
            raise RuntimeError("the turn ended without stream.done")
        return self.final

    async def wait(self) -> None:
        """Wait until the turn's task is over (after ``cancel()`` too)."""
        if self._task is not None:
            await asyncio.shield(self._task)


def _conversation_get(*, instance: Instance, user_id: int, conversation_id: str) -> Chat:
    chat = (
        Chat.objects.select_related("instance")
        .filter(
            pk=conversation_id,
            owner_id=user_id,
            instance=instance,
            mode=ChatMode.SERVER_MANAGED,
        )
        .first()
    )
    if chat is None:
        raise ConversationNotFoundError(conversation_id)
    return chat


def _conversation_create(
    *, instance: Instance, user_id: int, history: Sequence[Mapping[str, str]]
) -> tuple[Chat, tuple[dict[str, Any], ...]]:
    """A new server-managed chat holding ``history`` as done messages (sealed); the
    user's sockets get ``chat.created`` for it (docs/protocol.md §4). The user's transit
    key is ensured before (:func:`server_turn_start`)."""
    chat = chat_services.server_chat_create(
        user=get_user_model().objects.get(pk=user_id),
        chat_id=new_id(),
        instance=instance,
    )
    entries = []
    for item in history:
        if item.get("role") not in _HISTORY_ROLES or not item.get("content"):
            continue
        message_id = new_id()
        chat_services.server_message_create(
            chat=chat, message_id=message_id, role=item["role"], content=item["content"]
        )
        entries.append({"message_id": message_id, "role": item["role"], "content": item["content"]})
    chat.refresh_from_db()
    chat_notify.chat_changed(
        user_id=user_id, kind="chat.created", chat_id=chat.pk, version=chat.version
    )
    return chat, tuple(entries)


def conversation_history(*, chat: Chat) -> list[dict[str, Any]]:
    """The done user and assistant messages of a server-managed chat, decrypted, oldest
    first, as AI cache entries ``{"message_id", "role", "content"}``."""
    rows = Message.objects.filter(
        chat=chat,
        role__in=_HISTORY_ROLES,
        status=MessageStatus.DONE,
        server_content__isnull=False,
    ).order_by("chat_version")
    return [
        {
            "message_id": m.pk,
            "role": m.role,
            "content": chat_services.sealed_text_open(
                owner_id=chat.owner_id, object_id=m.pk, sealed=m.server_content or b""
            ),
        }
        for m in rows
    ]


def _accept(inp: ServerTurnInput) -> tuple[Chat, tuple[dict[str, Any], ...] | None, str, str]:
    if inp.conversation_id is None:
        chat, seeded = _conversation_create(
            instance=inp.instance, user_id=inp.user_id, history=inp.history
        )
    else:
        chat, seeded = (
            _conversation_get(
                instance=inp.instance, user_id=inp.user_id, conversation_id=inp.conversation_id
            ),
            None,
        )
    message_id, reply_id = new_id(), new_id()
    with transaction.atomic():
        chat_services.turn_accept(
            chat=chat, user=chat.owner, message_id=message_id, assistant_message_id=reply_id
        )
        if inp.end_user:
            Message.objects.filter(pk=message_id).update(end_user=inp.end_user[:256])
    return chat, seeded, message_id, reply_id


async def server_turn_start(inp: ServerTurnInput) -> ServerTurn:
    """Accept the message (user and reply rows, ``pending``) and start the turn in this
    process's turn registry (it runs once the conversation's lease is free).

    Raises:
        ConversationNotFoundError: ``conversation_id`` names no server-managed chat of the user
            in the instance (nothing is written).
        openmates.vault.VaultError: the user's transit key cannot be made or used.
    """
    warm_up.soon()
    await user_key_ensure(inp.user_id)  # cached by the process: no Vault call per turn
    chat, seeded, message_id, reply_id = await db_call(_accept, inp)
    request = TurnRequest(
        task_id=new_id(),
        user_id=inp.user_id,
        chat=chat,
        instance=inp.instance,
        role=inp.role,
        message_id=message_id,
        assistant_message_id=reply_id,
        content=inp.text,
        client_history=seeded or None,
        requested_tier=inp.tier,
        files=tuple(inp.files),
    )
    turns: TurnRegistry = registry()
    record = state.TaskRecord(
        task_id=request.task_id,
        user_id=str(inp.user_id),
        chat_id=chat.pk,
        message_id=message_id,
        assistant_message_id=reply_id,
        owner=await turns.ensure_started(),
        state="queued",
    )
    queue: asyncio.Queue[ev.ServerEvent | None] = asyncio.Queue()
    options = dict(inp.options)

    def factory(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        return _drive(request, control, queue, options)

    # Started from a context of its own: the turn outlives its caller (a request, a
    # channel's desk), so it must not inherit the caller's asgiref executors, which
    # end with the caller and would fail the turn's last database clean-up.
    active = await asyncio.create_task(
        turns.start(record=record, factory=factory, origin=None), context=contextvars.Context()
    )
    assert active.task is not None
    # The registry's task ends after the turn's last event (or without one, when it
    # crashed before run_turn): either way the consumer's iteration ends.
    active.task.add_done_callback(lambda _: queue.put_nowait(None))
    return ServerTurn(
        instance=inp.instance,
        conversation_id=chat.pk,
        message_id=message_id,
        reply_id=reply_id,
        control=active.control,
        _queue=queue,
        _task=active.task,
    )


async def _drive(
    request: TurnRequest,
    control: TurnControl,
    queue: asyncio.Queue[ev.ServerEvent | None],
    options: dict[str, Any],
) -> AsyncGenerator[ev.ServerEvent, None]:
    """Run the turn (in the registry's task), answering its history requests from
    PostgreSQL; every other event goes to the consumer's queue and on to the registry."""
    # Set inside the turn's own task: the options reach only this turn's main call.
    llm.main_call_options.set(options)
    async for event in run_turn(request, control):
        if isinstance(event, ev.RequestChatHistory):
            await _history_answer(request)
            control.history.set()
            continue
        queue.put_nowait(event)
        yield event


async def _history_answer(request: TurnRequest) -> None:
    """Put the conversation's stored messages into the AI cache (the client's part)."""
    messages = await db_call(conversation_history, chat=request.chat)
    with contextlib.suppress(ValueError):
        await chat_cache.ai_history_store(
            user_id=request.user_id, chat_id=request.chat.pk, messages=messages
        )
