"""The channel adapter interface and what every adapter shares: dedup, bursts, the turn.

docs/channels.md §2-§5. An adapter is configured through its constructor (the channel's
id, instance and credentials, and the platform's API base URL), ``start`` / ``stop`` are
called by the channel manager, inbound updates come through ``handle`` (a webhook view or
the adapter's own polling), and answers go out through ``send_message``.

Inbound messages go to the adapter's :class:`Desk`: the messages of one person in one chat
within ``MESSAGING_BURST_S`` of each other become one turn, and what arrives while that
person's turn runs waits for it and is the next turn (as the browser queues a message),
whichever processes the messages reach (they wait in Redis, ``messaging.bursts``).
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import dataclasses
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings

from instances.models import Instance
from messaging import bursts, services
from openmates import crypto, vault
from openmates.db import db_call
from openmates.redis_client import async_client
from pipeline import events as ev
from pipeline.server_turn import (
    ConversationNotFoundError,
    ServerTurnInput,
    server_turn_start,
)

logger = logging.getLogger(__name__)

# docs/channels.md §5: ``om:channel:seen:{config id}:{update id or event id}``.
SEEN_KEY = "om:channel:seen:{config_id}:{delivery_id}"
FAILED_REPLY = "Sorry, I could not answer that. Please try again."
NEW_CONVERSATION_REPLY = "Started a new conversation."
# A queued message's text is sealed as the pipeline's other Redis copies are (crypto.md §4).
SEAL_PURPOSE = "ai-cache"
REDACTED = "[credential]"


class AdapterError(RuntimeError):
    """The platform refused the adapter's credentials or could not be reached."""


@dataclass(frozen=True)
class Inbound:
    """One platform message for the instance.

    ``chat_key`` names the conversation's scope (a chat and topic, a channel and thread);
    ``target`` is the adapter's own description of where the answer goes.
    ``new_conversation``: ``/new`` (the text is then ignored). ``line_key`` names the
    scope whose messages merge into one turn (empty: ``chat_key``); a batch's turn goes
    to its first message's conversation and target.
    """

    platform_user_id: str
    display_name: str
    chat_key: str
    text: str
    target: Any
    new_conversation: bool = False
    line_key: str = ""


def redact(text: str, credentials: Mapping[str, str] | None) -> str:
    """``text`` with every credential value in it replaced by ``[credential]``: the
    platforms' client libraries quote a refused token in their errors (python-telegram-bot:
    "The token `…` was rejected"), and reasons are stored and shown in the admin."""
    for value in (credentials or {}).values():
        if value:
            text = text.replace(value, REDACTED)
    return text


def seen_key(*, config_id: int, delivery_id: str) -> str:
    """The Redis key marking update ``delivery_id`` of the channel as queued."""
    return SEEN_KEY.format(config_id=config_id, delivery_id=delivery_id)


async def delivery_seen(*, config_id: int, delivery_id: str) -> bool:
    """Whether the update ``delivery_id`` of the channel was queued already, in any
    process. A shortcut for redeliveries: the append that queues an update marks it seen
    in the same step and refuses one already marked (:func:`messaging.bursts.append`)."""
    key = seen_key(config_id=config_id, delivery_id=delivery_id)
    return bool(await async_client().exists(key))


class ChannelAdapter(abc.ABC):
    """One running channel of an instance (a Telegram bot, a Slack app).

    Subclasses set ``kind`` and implement ``start``, ``stop``, ``check``,
    ``send_message``, ``typing`` and ``handle``; ``verify`` for webhooks.
    """

    kind: ClassVar[str]
    # The adapter's ``Inbound.target`` dataclass (queued in Redis as its fields).
    target_type: ClassVar[type[Any]]
    mode: str = "webhook"

    def __init__(
        self,
        *,
        config_id: int,
        instance: Instance,
        credentials: Mapping[str, str],
        api_base: str,
    ) -> None:
        self.config_id = config_id
        self.instance = instance
        self.credentials = dict(credentials)
        self.api_base = api_base
        self.desk = Desk(self)

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (check the credentials, register the webhook or start polling).

        Raises:
            AdapterError: the platform refused the credentials or was unreachable.
        """

    async def stop(self) -> None:
        """Stop taking updates and cancel what is waiting; running turns end cancelled."""
        await self.desk.close()

    async def retire(self) -> None:
        """The channel was disabled or deleted: undo what ``start`` registered on the
        platform (called before ``stop``; nothing by default). Raises what the platform's
        client raises; the manager logs it."""
        return None

    @abc.abstractmethod
    async def check(self) -> str:
        """Test the connection; returns the bot's name. Raises ``AdapterError``."""

    @abc.abstractmethod
    async def send_message(self, target: Any, markdown: str) -> None:
        """Send ``markdown`` to ``target``, converted and split to the platform's limits."""

    @abc.abstractmethod
    def typing(self, target: Any) -> contextlib.AbstractAsyncContextManager[None]:
        """Show that an answer is being written while the context is open."""

    def verify(self, headers: Mapping[str, str], body: bytes) -> bool:
        """Whether a webhook request comes from the platform (secret or signature)."""
        return False

    @abc.abstractmethod
    async def handle(self, payload: Mapping[str, Any]) -> None:
        """Take one update (a Telegram ``Update``, a Slack event envelope): deduplicated,
        filtered, handed to the desk. Returns at once; the turn runs in the background."""

    async def deliver(self, inbound: Inbound, *, delivery_id: str) -> None:
        """Hand one message (update ``delivery_id``) to the desk; notes the update's
        arrival. Raises what :meth:`Desk.submit` raises; the update is then not marked
        seen (the webhook's error answer makes the platform redeliver)."""
        await db_call(services.update_received, config_id=self.config_id)
        await self.desk.submit(inbound, delivery_id=delivery_id)


class Desk:
    """Bursts merged into one turn and messages queued behind a running turn, per person
    and chat, across every process (``messaging.bursts``, docs/channels.md §5).

    ``submit`` appends the message to its line in Redis; the process whose append found
    the line without a leader leads it: a worker task that waits until the burst is
    over, takes the whole batch, runs one turn, and goes on while more waits. ``sweep``
    adopts the lines whose leader died. ``turns_started`` counts this desk's turns.
    """

    def __init__(self, adapter: ChannelAdapter) -> None:
        self.adapter = adapter
        self.workers: dict[str, asyncio.Task[None]] = {}
        self.turns_started = 0

    def _line(self, *, chat_key: str, platform_user_id: str) -> bursts.Line:
        return bursts.Line(config_id=self.adapter.config_id, line=f"{chat_key}/{platform_user_id}")

    async def submit(self, inbound: Inbound, *, delivery_id: str) -> None:
        """Queue ``inbound`` (update ``delivery_id``) in Redis, its text sealed under the
        person's pseudo-user, and mark the update seen, in one step (an update already
        seen is dropped); lead its line when no process does. Once this returns the
        message is in Redis: a process that dies later loses none of it, and one that
        dies before leaves the update unmarked for the platform's redelivery.

        Raises:
            openmates.vault.VaultError: the text could not be sealed (nothing queued).
            redis.RedisError: Redis is unreachable (nothing queued).
        """
        identity = await db_call(
            services.identity_ensure,
            instance=self.adapter.instance,
            kind=self.adapter.kind,
            platform_user_id=inbound.platform_user_id,
            display_name=inbound.display_name,
        )
        object_id = f"channel:{self.adapter.config_id}:{delivery_id}"
        sealed = await crypto.aseal(
            key_name=vault.user_key_name(identity.user_id),
            purpose=SEAL_PURPOSE,
            owner_id=identity.user_id,
            object_id=object_id,
            plaintext=inbound.text.encode(),
        )
        item = {
            "user_id": identity.user_id,
            "platform_user_id": inbound.platform_user_id,
            "chat_key": inbound.chat_key,
            "target": dataclasses.asdict(inbound.target),
            "new": inbound.new_conversation,
            "object_id": object_id,
            "sealed": base64.b64encode(sealed).decode(),
        }
        line = self._line(
            chat_key=inbound.line_key or inbound.chat_key,
            platform_user_id=inbound.platform_user_id,
        )
        token = uuid.uuid4().hex
        ttl_s = float(settings.MESSAGING_DEDUP_TTL_S)
        seen = seen_key(config_id=self.adapter.config_id, delivery_id=delivery_id)
        appended = await bursts.append(
            line, json.dumps(item), token=token, ttl_s=ttl_s, seen_key=seen
        )
        if appended == bursts.LEADING:
            self._lead(line, token)

    async def sweep(self) -> int:
        """Lead the channel's lines that wait without a leader (its process died or
        stopped); returns how many this desk took over."""
        adopted = 0
        for line in await bursts.lines_waiting(self.adapter.config_id):
            worker = self.workers.get(line.line)
            if worker is not None and not worker.done():
                continue
            token = uuid.uuid4().hex
            if await bursts.adopt(line, token=token):
                self._lead(line, token)
                adopted += 1
        return adopted

    def _lead(self, line: bursts.Line, token: str) -> None:
        task = asyncio.get_running_loop().create_task(self._work(line, token))
        self.workers[line.line] = task

    async def idle(self) -> None:
        """Wait until every line this desk leads is done (tests, shutdown)."""
        while workers := [w for w in self.workers.values() if not w.done()]:
            await asyncio.gather(*workers, return_exceptions=True)

    async def close(self) -> None:
        """Cancel every worker (their turns end cancelled); what still waits in Redis
        is left to the other processes' sweeps."""
        workers = list(self.workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self.workers.clear()

    async def _work(self, line: bursts.Line, token: str) -> None:
        keeper = asyncio.get_running_loop().create_task(self._keep(line, token))
        done = False
        try:
            while not done:
                taken = await bursts.take(
                    line,
                    token=token,
                    burst_s=settings.MESSAGING_BURST_S,
                    max_wait_s=settings.MESSAGING_BURST_MAX_S,
                    ttl_s=float(settings.MESSAGING_DEDUP_TTL_S),
                )
                if taken.lost:
                    logger.warning("channel %s: lost the lead of a line", self.adapter.config_id)
                    return
                if taken.wait_s > 0:
                    # The burst goes on (a message came meanwhile, in any process).
                    await asyncio.sleep(taken.wait_s)
                    continue
                settle = functools.partial(bursts.settle, line, token=token)
                try:
                    await self._answer(taken.items, settle)
                except Exception:  # one failed turn must not stop the line
                    logger.exception("channel %s: a turn failed", self.adapter.config_id)
                await settle()
                done = await bursts.release(line, token=token)
        finally:
            keeper.cancel()
            if not done:  # cancelled or failed: the next message or a sweep takes over
                with contextlib.suppress(Exception):
                    await asyncio.shield(bursts.resign(line, token=token))
            if self.workers.get(line.line) is asyncio.current_task():
                del self.workers[line.line]

    async def _keep(self, line: bursts.Line, token: str) -> None:
        """Renew the lead while the worker runs (its turn may take minutes)."""
        while True:
            await asyncio.sleep(bursts.LEADER_LEASE_S / 3)
            try:
                if not await bursts.renew(line, token=token):
                    return
            except Exception as exc:  # Redis away for a moment: try again
                logger.warning("channel %s: lead not renewed: %s", self.adapter.config_id, exc)

    async def _open(self, items: Sequence[str]) -> list[Inbound]:
        """The batch's messages with their texts opened (one that no longer opens, its
        key deleted, is left out)."""
        opened = []
        for raw in items:
            item = json.loads(raw)
            try:
                text = await crypto.aopen_sealed(
                    key_name=vault.user_key_name(item["user_id"]),
                    purpose=SEAL_PURPOSE,
                    owner_id=item["user_id"],
                    object_id=item["object_id"],
                    sealed=base64.b64decode(item["sealed"]),
                )
            except crypto.DecryptionError:
                logger.warning("channel %s: a queued message no longer opens", item["object_id"])
                continue
            opened.append(
                Inbound(
                    platform_user_id=item["platform_user_id"],
                    display_name="",
                    chat_key=item["chat_key"],
                    text=text.decode(),
                    target=self.adapter.target_type(**item["target"]),
                    new_conversation=bool(item["new"]),
                )
            )
        return opened

    async def _answer(self, items: Sequence[str], settle: Callable[[], Awaitable[None]]) -> None:
        """One turn for the batch ``items`` (``settle`` once it has started)."""
        batch = await self._open(items)
        if not batch:
            return
        last = batch[-1]
        identity = await db_call(
            services.identity_ensure,
            instance=self.adapter.instance,
            kind=self.adapter.kind,
            platform_user_id=last.platform_user_id,
        )
        # Messages after the last /new are the next conversation's.
        starts = [i for i, m in enumerate(batch) if m.new_conversation]
        if starts:
            await db_call(services.conversation_forget, identity=identity, chat_key=last.chat_key)
            batch = batch[starts[-1] + 1 :]
            if not batch:
                await settle()
                await self.adapter.send_message(last.target, NEW_CONVERSATION_REPLY)
                return
        text = "\n\n".join(m.text for m in batch if m.text)
        if text:
            # The first message's conversation (a Slack burst of top-level mentions is
            # answered in the first one's thread).
            await self._turn(identity, batch[0], text, settle)

    async def _turn(
        self, identity: Any, head: Inbound, text: str, settle: Callable[[], Awaitable[None]]
    ) -> None:
        conversation = await db_call(
            services.conversation_get, identity=identity, chat_key=head.chat_key
        )
        turn_input = ServerTurnInput(
            instance=self.adapter.instance,
            user_id=identity.user_id,
            role="member",
            text=text,
            conversation_id=conversation,
        )
        try:
            turn = await server_turn_start(turn_input)
        except ConversationNotFoundError:  # deleted meanwhile: start again
            turn_input = ServerTurnInput(
                instance=self.adapter.instance, user_id=identity.user_id, role="member", text=text
            )
            turn = await server_turn_start(turn_input)
        # The user message is stored with the turn: the batch need not wait in Redis.
        await settle()
        self.turns_started += 1
        if turn.conversation_id != conversation:
            await db_call(
                services.conversation_set,
                identity=identity,
                chat_key=head.chat_key,
                chat_id=turn.conversation_id,
            )
        await self._deliver_reply(turn.events(), head.target)

    async def _deliver_reply(self, events: AsyncIterator[ev.ServerEvent], target: Any) -> None:
        """Typing until ``StreamDone``, then the answer (or an apology); the events after
        it (post-processing) are read to their end, so the turn finishes here."""
        typing = contextlib.AsyncExitStack()
        await typing.enter_async_context(self.adapter.typing(target))
        try:
            async for event in events:
                if isinstance(event, ev.StreamDone):
                    await typing.aclose()
                    content = event.content if event.status == "done" else ""
                    await self.adapter.send_message(target, content or FAILED_REPLY)
        finally:
            await typing.aclose()
