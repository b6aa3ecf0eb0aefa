"""Telegram: a bot answering through python-telegram-bot's ``Bot`` (docs/channels.md §3).

Webhook mode when ``MESSAGING_PUBLIC_URL`` is set: on start the bot's webhook is set to
``<public url>/channels/telegram/<config id>/`` with a secret token (HMAC-SHA256 of the
config id keyed by the bot token, so it needs no storage of its own) that every webhook
request must carry in ``X-Telegram-Bot-Api-Secret-Token``. Otherwise long polling
(``getUpdates``), for a machine without a public address: one process per bot polls at a
time, under a Redis lease (``om:channel:poll:{config id}``), since Telegram refuses two
concurrent ``getUpdates``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import logging
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from telegram import Bot, Message, MessageEntity, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, TelegramError
from telegram.request import HTTPXRequest

from messaging import services
from messaging.adapters.base import (
    AdapterError,
    ChannelAdapter,
    Inbound,
    delivery_seen,
    redact,
)
from messaging.markup import telegram_messages
from openmates.db import db_call
from openmates.redis_client import async_client

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 (a header name)
POLL_LEASE_KEY = "om:channel:poll:{config_id}"
_TAG_RE = re.compile(r"<[^>]+>")
# Telegram shows "typing…" for 5 seconds per sendChatAction.
TYPING_EVERY_S = 4.0
_NEW_COMMANDS = ("/new", "/start")


@dataclass(frozen=True)
class TelegramTarget:
    """Where an answer goes: the chat, and the forum topic when there is one."""

    chat_id: int
    thread_id: int | None = None


def webhook_secret(*, bot_token: str, config_id: int) -> str:
    """The webhook's secret token (64 hex characters, within Telegram's 1-256 of
    ``A-Za-z0-9_-``)."""
    message = f"openmates-webhook:{config_id}".encode()
    return hmac.new(bot_token.encode(), message, hashlib.sha256).hexdigest()


class TelegramAdapter(ChannelAdapter):
    """A Telegram bot of an instance (credentials ``{"bot_token"}``)."""

    kind = "telegram"
    target_type = TelegramTarget
    poll_timeout_s = 25
    poll_lease_s = 60

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        token = self.credentials["bot_token"]
        self.secret = webhook_secret(bot_token=token, config_id=self.config_id)
        self.bot = Bot(
            token,
            base_url=self.api_base,
            request=HTTPXRequest(connect_timeout=10, read_timeout=20),
            get_updates_request=HTTPXRequest(
                connect_timeout=10, read_timeout=self.poll_timeout_s + 10
            ),
        )
        self.username = ""
        self._poller: asyncio.Task[None] | None = None
        self._lease_token = uuid.uuid4().hex

    async def start(self) -> None:
        try:
            await self.bot.initialize()
            self.username = self.bot.username
            if settings.MESSAGING_PUBLIC_URL:
                self.mode = "webhook"
                await self.bot.set_webhook(
                    url=f"{settings.MESSAGING_PUBLIC_URL}/channels/telegram/{self.config_id}/",
                    secret_token=self.secret,
                    allowed_updates=["message"],
                )
            else:
                self.mode = "polling"
                await self.bot.delete_webhook()
        except TelegramError as exc:
            raise AdapterError(f"Telegram: {exc.message}") from exc
        if self.mode == "polling":
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            await self._lease_release()
        await super().stop()
        with contextlib.suppress(Exception):
            await self.bot.shutdown()

    async def retire(self) -> None:
        """Delete the bot's webhook (webhook mode), so Telegram stops posting updates that
        no process takes; a polled bot has none."""
        if self.mode == "webhook":
            await self.bot.delete_webhook()

    async def check(self) -> str:
        try:
            await self.bot.initialize()
            me = await self.bot.get_me()
        except TelegramError as exc:
            raise AdapterError(f"Telegram: {exc.message}") from exc
        return f"@{me.username}"

    def verify(self, headers: Mapping[str, str], body: bytes) -> bool:
        given = headers.get(SECRET_HEADER, "")
        return hmac.compare_digest(given.encode(), self.secret.encode())

    async def handle(self, payload: Mapping[str, Any]) -> None:
        update_id = payload.get("update_id")
        if not isinstance(update_id, int):
            return
        if await delivery_seen(config_id=self.config_id, delivery_id=f"u{update_id}"):
            return
        update = Update.de_json(dict(payload), self.bot)
        inbound = self._inbound(update.message) if update.message else None
        if inbound is not None:
            await self.deliver(inbound, delivery_id=f"u{update_id}")

    def _inbound(self, message: Message) -> Inbound | None:
        """The message for the instance, or None (a bot's, no text, a group message that
        does not address the bot)."""
        sender, text = message.from_user, message.text
        if sender is None or sender.is_bot or not text:
            return None
        command = text.split(maxsplit=1)[0].lower() if text.strip() else ""
        command_name, _, addressee = command.partition("@")
        is_new = command_name in _NEW_COMMANDS and addressee in ("", self.username.lower())
        if message.chat.type in ("group", "supergroup") and not is_new:
            text = self._addressed(message, text)
            if text is None:
                return None
        thread_id = message.message_thread_id if message.is_topic_message else None
        return Inbound(
            platform_user_id=str(sender.id),
            display_name=sender.full_name,
            chat_key=f"{message.chat.id}:{thread_id or ''}",
            text=text.strip(),
            target=TelegramTarget(chat_id=message.chat.id, thread_id=thread_id),
            new_conversation=is_new,
        )

    def _addressed(self, message: Message, text: str) -> str | None:
        """A group message's text without the bot's @mention, or None when it neither
        mentions the bot nor replies to it. The mention is the whole username
        (``@mate_bot`` is not in ``@mate_bot2``): Telegram's ``mention`` entities when the
        message has entities, else the text."""
        replied = message.reply_to_message
        if replied is not None and replied.from_user and replied.from_user.id == self.bot.id:
            return text
        mention = f"@{self.username}".lower()
        own = re.compile(rf"(?<![\w@]){re.escape(mention)}(?!\w)", re.IGNORECASE)
        if message.entities:
            mentions = message.parse_entities([MessageEntity.MENTION]).values()
            mentioned = any(value.lower() == mention for value in mentions)
        else:
            mentioned = own.search(text) is not None
        return own.sub("", text) if mentioned else None

    async def send_message(self, target: TelegramTarget, markdown: str) -> None:
        for part in telegram_messages(markdown):
            try:
                await self.bot.send_message(
                    chat_id=target.chat_id,
                    text=part,
                    parse_mode=ParseMode.HTML,
                    message_thread_id=target.thread_id,
                )
            except BadRequest as exc:
                if "entities" not in exc.message.lower():
                    raise
                # Telegram refused the markup: the same text without it.
                plain = html.unescape(_TAG_RE.sub("", part))
                await self.bot.send_message(
                    chat_id=target.chat_id, text=plain, message_thread_id=target.thread_id
                )

    @contextlib.asynccontextmanager
    async def typing(self, target: TelegramTarget) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(self._typing(target))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _typing(self, target: TelegramTarget) -> None:
        while True:
            with contextlib.suppress(TelegramError):
                await self.bot.send_chat_action(
                    chat_id=target.chat_id,
                    action=ChatAction.TYPING,
                    message_thread_id=target.thread_id,
                )
            await asyncio.sleep(TYPING_EVERY_S)

    # --- long polling ---

    async def _lease(self) -> bool:
        """Take or keep the poll lease of this bot (one poller across processes)."""
        client = async_client()
        key = POLL_LEASE_KEY.format(config_id=self.config_id)
        token = self._lease_token.encode()
        if await client.set(key, token, nx=True, ex=self.poll_lease_s):
            return True
        if await client.get(key) == token:
            await client.expire(key, self.poll_lease_s)
            return True
        return False

    async def _lease_release(self) -> None:
        client = async_client()
        key = POLL_LEASE_KEY.format(config_id=self.config_id)
        with contextlib.suppress(Exception):
            if await client.get(key) == self._lease_token.encode():
                await client.delete(key)

    async def _poll(self) -> None:
        """Long-poll ``getUpdates`` while holding the lease; errors are recorded on the
        channel and retried with a growing pause (at most a minute). The offset passes an
        update only once :meth:`handle` took it, so one that could not be queued is
        fetched again."""
        offset: int | None = None
        pause = 1.0
        while True:
            try:
                if not await self._lease():
                    await asyncio.sleep(self.poll_lease_s / 3)
                    continue
                updates = await self.bot.get_updates(
                    offset=offset, timeout=self.poll_timeout_s, allowed_updates=["message"]
                )
                for update in updates:
                    # Confirmed (by the next poll's offset) only once queued: an update
                    # that fails is polled again after the pause.
                    await self.handle(update.to_dict())
                    offset = update.update_id + 1
                if pause > 1.0:  # recovered
                    await db_call(services.state_record, config_id=self.config_id, status="running")
                pause = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = redact(f"polling: {exc}", self.credentials)
                logger.warning("channel %s: %s", self.config_id, reason)
                await db_call(
                    services.state_record, config_id=self.config_id, status="error", reason=reason
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 60.0) if pause > 1.0 else 2.0
