"""Slack: an app answering through the Events API and slack-sdk's ``AsyncWebClient``.

docs/channels.md §3. Slack posts events to ``/channels/slack/<config id>/``; a request
counts only with a valid ``X-Slack-Signature`` (HMAC-SHA256 of ``v0:<timestamp>:<body>``
under the signing secret) and an ``X-Slack-Request-Timestamp`` within five minutes of
now (slack-sdk's ``SignatureVerifier``). The view answers at once (Slack wants its 200
within 3 seconds) and the answer is posted later: in the DM itself for a direct message,
else in the message's thread. The app answers direct messages and, in channels, messages
that mention it (``app_mention``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from messaging.adapters.base import AdapterError, ChannelAdapter, Inbound, delivery_seen
from messaging.markup import slack_sections

# Shown on the user's message while the answer is written (bots cannot send "typing").
TYPING_REACTION = "hourglass_flowing_sand"


@dataclass(frozen=True)
class SlackTarget:
    """Where an answer goes: the channel, the thread (its first message's ``ts``; empty:
    the channel itself, a DM's top level), and the message answered (for the typing
    reaction)."""

    channel: str
    thread_ts: str
    message_ts: str


class SlackAdapter(ChannelAdapter):
    """A Slack app of an instance (credentials ``{"bot_token", "signing_secret"}``)."""

    kind = "slack"
    target_type = SlackTarget
    mode = "events"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = AsyncWebClient(token=self.credentials["bot_token"], base_url=self.api_base)
        self.verifier = SignatureVerifier(self.credentials["signing_secret"])
        self.bot_user_id = ""

    async def start(self) -> None:
        self.bot_user_id = (await self._auth())["user_id"]

    async def _auth(self) -> dict[str, Any]:
        try:
            answer = await self.client.auth_test()
        except SlackApiError as exc:
            raise AdapterError(f"Slack: {exc.response.get('error', 'refused')}") from exc
        except (SlackClientError, OSError) as exc:
            raise AdapterError(f"Slack: {exc}") from exc
        return dict(answer.data) if isinstance(answer.data, dict) else {}

    async def check(self) -> str:
        answer = await self._auth()
        return f"{answer.get('user', '?')} in {answer.get('team', '?')}"

    def verify(self, headers: Mapping[str, str], body: bytes) -> bool:
        try:
            return self.verifier.is_valid(
                body=body,
                timestamp=headers.get("X-Slack-Request-Timestamp"),
                signature=headers.get("X-Slack-Signature"),
            )
        except ValueError:  # a timestamp that is not a number
            return False

    async def handle(self, payload: Mapping[str, Any]) -> None:
        event_id = payload.get("event_id")
        event = payload.get("event")
        if payload.get("type") != "event_callback" or not isinstance(event_id, str):
            return
        if not isinstance(event, dict):
            return
        if await delivery_seen(config_id=self.config_id, delivery_id=event_id):
            return
        inbound = self._inbound(event, team=str(payload.get("team_id", "")))
        if inbound is not None:
            await self.deliver(inbound, delivery_id=event_id)

    def _inbound(self, event: Mapping[str, Any], *, team: str) -> Inbound | None:
        """A direct message or a mention for the app, or None (bots, edits, other events).

        A direct message outside a thread belongs to the DM's one conversation and is
        answered in the DM itself; a message in a thread (DM or channel) to that thread's,
        answered there. A top-level mention in a channel starts a thread: answered in it,
        its conversation; one person's top-level mentions of a burst in a channel are one
        turn, answered in the first one's thread.
        """
        if event.get("bot_id") or event.get("subtype") or event.get("user") == self.bot_user_id:
            return None
        direct = event.get("type") == "message" and event.get("channel_type") == "im"
        user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
        text = event.get("text")
        if not (direct or event.get("type") == "app_mention"):
            return None
        if not all(isinstance(v, str) for v in (user, channel, ts, text)):
            return None
        in_thread = str(event.get("thread_ts") or "")
        thread_ts = in_thread if in_thread or direct else str(ts)
        return Inbound(
            platform_user_id=f"{team}:{user}",
            display_name=str(user),
            chat_key=f"{channel}:{thread_ts}",
            text=self._without_mention(str(text)),
            target=SlackTarget(channel=str(channel), thread_ts=thread_ts, message_ts=str(ts)),
            line_key=f"{channel}:{in_thread}",
        )

    def _without_mention(self, text: str) -> str:
        """``text`` without the app's own ``<@U…>`` mentions (other people's stay)."""
        if not self.bot_user_id:
            return text.strip()
        own = re.compile(rf"<@{re.escape(self.bot_user_id)}(?:\|[^>]*)?>")
        return own.sub("", text).strip()

    async def send_message(self, target: SlackTarget, markdown: str) -> None:
        for section in slack_sections(markdown):
            await self.client.chat_postMessage(
                channel=target.channel,
                thread_ts=target.thread_ts or None,
                text=section,
                blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": section}}],
            )

    @contextlib.asynccontextmanager
    async def typing(self, target: SlackTarget) -> AsyncIterator[None]:
        with contextlib.suppress(SlackClientError):
            await self.client.reactions_add(
                channel=target.channel, timestamp=target.message_ts, name=TYPING_REACTION
            )
        try:
            yield
        finally:
            with contextlib.suppress(SlackClientError):
                await self.client.reactions_remove(
                    channel=target.channel, timestamp=target.message_ts, name=TYPING_REACTION
                )
