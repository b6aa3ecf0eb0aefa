"""``manage.py chat --instance SLUG``: talk to an instance in the terminal.

The conversation is server-managed (its content sealed under the user's transit key)
and every message goes through ``pipeline.server_turn``, the same ``run_turn`` as the
WebSocket: pre-processing, the main model with tools, post-processing. Replies stream as
they arrive; tool calls show as ``[tool: status]`` lines. ``--chat ID`` continues an
earlier conversation. Ctrl-C while a reply streams cancels that turn; Ctrl-D (or an empty
line) ends. Libraries' log records below WARNING (httpx's request lines) are kept off the
terminal while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chats import services as chat_services
from chats.models import Chat, ChatMode
from instances.models import Instance, InstanceMember
from pipeline import events as ev
from pipeline.ids import new_id
from pipeline.server_turn import ServerTurnInput, server_turn_start

# OpenMates' own packages: their records reach the terminal at the configured level; a
# library's only from WARNING up.
FIRST_PARTY = frozenset(
    {
        "openmates",
        "instances",
        "accounts",
        "memories",
        "chats",
        "skills",
        "pipeline",
        "openai_api",
        "messaging",
    }
)


class LibraryChatterFilter(logging.Filter):
    """Drops a library's records below WARNING (httpx's "HTTP Request: POST …" lines),
    which would otherwise print into the conversation on the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return record.name.split(".", 1)[0] in FIRST_PARTY


@contextlib.contextmanager
def library_chatter_hidden() -> Iterator[None]:
    """While the conversation runs: :class:`LibraryChatterFilter` on the root logger's
    handlers (where library records end up), removed afterwards."""
    handlers = list(logging.getLogger().handlers)
    chatter = LibraryChatterFilter()
    for handler in handlers:
        handler.addFilter(chatter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(chatter)


class Command(BaseCommand):
    help = "Chat with an instance in the terminal through the full pipeline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--instance", required=True, help="The instance's slug.")
        parser.add_argument("--user", help="Username (default: the instance's owner).")
        parser.add_argument("--chat", help="Continue this server-managed chat id.")

    def handle(self, *args: Any, **options: Any) -> None:
        instance = Instance.objects.filter(slug=options["instance"]).first()
        if instance is None:
            raise CommandError(f"No instance {options['instance']!r}.")
        user = self._user(instance, options.get("user"))
        role = (
            InstanceMember.objects.filter(instance=instance, user=user)
            .values_list("role", flat=True)
            .first()
        )
        if role is None:
            # As on the WebSocket: no turn spends an instance's keys for a non-member.
            raise CommandError(f"{user.username} is not a member of {instance.slug}.")
        chat_services.user_transit_key_ensure(user_id=user.pk)
        chat = self._chat(instance, user, options.get("chat"))
        # Replies stream piece by piece: no automatic newline after each write.
        self.stdout.ending = ""
        self.stdout.write(f"Chat {chat.pk} with {instance.name}. Empty line or Ctrl-D ends.\n")
        with library_chatter_hidden():
            while True:
                try:
                    line = input("you> ").strip()
                except EOFError:
                    line = ""
                if not line:
                    return
                asyncio.run(self._turn(chat, instance, user, role, line, self.stdout))

    def _user(self, instance: Instance, username: str | None) -> Any:
        users = get_user_model().objects
        if username:
            user = users.filter(username=username).first()
        else:
            owner = InstanceMember.objects.filter(
                instance=instance, role=InstanceMember.Role.OWNER
            ).first()
            user = users.filter(pk=owner.user_id).first() if owner else None
        if user is None:
            raise CommandError("No such user; pass --user USERNAME.")
        return user

    def _chat(self, instance: Instance, user: Any, chat_id: str | None) -> Chat:
        if chat_id is None:
            return chat_services.server_chat_create(user=user, chat_id=new_id(), instance=instance)
        chat = Chat.objects.filter(
            pk=chat_id, owner=user, instance=instance, mode=ChatMode.SERVER_MANAGED
        ).first()
        if chat is None:
            raise CommandError(f"No server-managed chat {chat_id} of this user and instance.")
        return chat

    async def _turn(
        self, chat: Chat, instance: Instance, user: Any, role: str, content: str, out: Any
    ) -> None:
        turn = await server_turn_start(
            ServerTurnInput(
                instance=instance, user_id=user.pk, role=role, text=content, conversation_id=chat.pk
            )
        )
        task = asyncio.create_task(_print_turn(turn.events(), out))
        try:
            await asyncio.shield(task)
        except (KeyboardInterrupt, asyncio.CancelledError):
            turn.cancel()
            await task


async def _print_turn(events: Any, out: TextIO) -> None:
    """Render a turn's events as terminal text."""
    out.write("mate> ")
    async for event in events:
        if isinstance(event, ev.ReplyDelta):
            out.write(event.text)
            out.flush()
        elif isinstance(event, ev.SkillStatus):
            out.write(f"\n[{event.tool}: {event.status}]\n")
        elif isinstance(event, ev.Error):
            out.write(f"\n[error {event.code}: {event.message}]\n")
        elif isinstance(event, ev.StreamDone) and event.status != "done":
            out.write(f"\n[{event.status}]")
        elif isinstance(event, ev.PostprocessDone) and event.follow_ups:
            out.write("\n" + "\n".join(f"  ? {q}" for q in event.follow_ups))
    out.write("\n")
    out.flush()
