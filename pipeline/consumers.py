"""The chat WebSocket at ``/ws/chat/`` (docs/protocol.md): a relay.

It validates each frame (``pipeline.protocol``), hands it to ``pipeline.actions`` and
forwards what the turn runtime and the channel layer send it. Errors become ``error``
frames and never close the socket; a socket without an authenticated user (session or API
token, ``accounts.ws_auth``) is refused, and one whose session ends or whose token is revoked
(``session.ended`` from the accounts app) closes with 4401, as does a token socket when its
token expires.

Group membership and that event live in Redis and can be lost (``group_expiry``, a flush, a
restart without persistence), so each socket re-joins its groups every
:func:`group_rejoin_s` and re-checks its sign-in then and before acting on a frame
(``accounts.ws_auth.SignInCheck``, cached a few seconds): a sign-in found invalid closes
the socket with 4401.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from accounts.ws_auth import (
    SignInCheck,
    accepted_subprotocol,
    sign_in_socket_groups,
    token_seconds_left,
)
from pipeline import actions, runtime, warm_up
from pipeline import events as ev
from pipeline.protocol import FrameError, error_for_exception, parse_frame

logger = logging.getLogger(__name__)

SESSION_ENDED = 4401
NOT_FOUND = 4404


def group_rejoin_s(layer: Any) -> float:
    """Seconds between a socket's re-joins of its groups (``PIPELINE_GROUP_REJOIN_S``,
    default 30), never more than a quarter of the channel layer's ``group_expiry``."""
    configured = float(settings.PIPELINE_GROUP_REJOIN_S)
    return min(configured, float(getattr(layer, "group_expiry", 86400)) / 4)


class ChatConsumer(AsyncWebsocketConsumer):
    """One client socket. ``registry_name`` lets tests run two "processes" in one loop."""

    registry_name = "default"

    async def connect(self) -> None:
        self.user: Any = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=SESSION_ENDED)
            return
        # The first turn of a user seals under their data key: warm it while the socket
        # opens (in the background; the turn waits for it if it is still running).
        actions.user_key_warm(self.user.pk)
        warm_up.soon()  # a user who opens the app is about to send: load the models
        self.registry = runtime.registry(self.registry_name)
        self.following: set[str] = set()
        self.last_sequence: dict[str, int] = {}
        self.sign_in = SignInCheck(self.scope)
        self.closing = False
        # It also joins its token's or its session's group: revoking the one or signing out of
        # the other closes it (4401).
        self.groups_joined = [runtime.user_group(self.user.pk), *sign_in_socket_groups(self.scope)]
        await self.registry.ensure_started()
        await self._groups_join()
        await self.accept(accepted_subprotocol(self.scope))
        if (seconds := token_seconds_left(self.scope)) is not None:  # token expiry: 4401
            self.expiry = asyncio.get_running_loop().call_later(seconds, self._token_expired)
        self.keeper = asyncio.create_task(self._keep_joined(), name="socket-groups")
        await self.deliver((await actions.task_active(self)).to_frame())

    async def _groups_join(self) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def _keep_joined(self) -> None:
        """Re-join the groups and re-check the sign-in, every ``group_rejoin_s``."""
        period = group_rejoin_s(self.channel_layer)
        # Sockets that connected together (a restart) spread their re-joins out.
        await asyncio.sleep(period * random.uniform(0.5, 1.0))  # noqa: S311 (not a secret)
        while True:
            try:
                if not await self.still_signed_in():
                    return
                await self._groups_join()
            except Exception:
                logger.warning("socket groups not re-joined", exc_info=True)
            await asyncio.sleep(period)

    async def still_signed_in(self) -> bool:
        """True while the socket's session or token holds (``SignInCheck``); otherwise the
        socket is closed with 4401 and False returned."""
        if await self.sign_in.valid():
            return True
        if not self.closing:
            self.closing = True
            await self.close(code=SESSION_ENDED)
        return False

    def _token_expired(self) -> None:
        self.expiry_close = asyncio.ensure_future(self.close(code=SESSION_ENDED))

    async def disconnect(self, code: int) -> None:
        if getattr(self, "expiry", None) is not None:
            self.expiry.cancel()
        if getattr(self, "keeper", None) is not None:
            self.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.keeper
        if getattr(self, "registry", None) is not None:
            self.registry.unsubscribe(self)
            for group in self.groups_joined:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            try:
                frame = parse_frame(text_data, bytes_data)
            except FrameError:
                # A frame that does not parse counts against the frame limit as well: a
                # client sending garbage is answered rate_limited past it, like any other.
                await actions.rate_check(self)
                raise
            await actions.dispatch(self, frame)
        except FrameError as error:
            await self.deliver(
                ev.Error(
                    code=error.code,
                    message=error.message,
                    retry_after=error.retry_after,
                    **error.ids,
                ).to_frame()
            )
        except Exception as exc:
            code, message = error_for_exception(exc, doing="frame")
            await self.deliver(ev.Error(code=code, message=message).to_frame())

    async def deliver(self, frame: dict[str, Any]) -> None:
        """Send one frame; a delta this socket already has (by sequence) is skipped."""
        kind, task_id = frame["type"], frame.get("task_id", "")
        if kind == "stream.delta":
            if frame["sequence"] <= self.last_sequence.get(task_id, 0):
                return
            self.last_sequence[task_id] = frame["sequence"]
        elif kind == "stream.snapshot":
            self.last_sequence[task_id] = frame["sequence"]
        await self.send(text_data=json.dumps(frame, ensure_ascii=False))

    # --- channel-layer messages -----------------------------------------------------------

    async def turn_announce(self, message: dict[str, Any]) -> None:
        await actions.turn_follow(self, str(message["task_id"]))

    async def turn_frames(self, message: dict[str, Any]) -> None:
        for frame in message["frames"]:
            await self.deliver(frame)

    async def turn_ended(self, message: dict[str, Any]) -> None:
        try:
            await actions.turn_ended(self, str(message["task_id"]))
        except FrameError:
            return

    async def chat_event(self, message: dict[str, Any]) -> None:
        """A change to one of the user's chats made through another socket (``chat.*``)."""
        if message.get("origin") != self.channel_name:
            await self.deliver(dict(message["frame"]))

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=int(message.get("code", SESSION_ENDED)))


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Any WebSocket path without a route: the handshake is refused with close code 4404.

    (Without it Channels' URLRouter raises "No route found", an HTTP 500.) Servers answer
    a close before accept with HTTP 403.
    """

    async def connect(self) -> None:
        await self.close(code=NOT_FOUND)
