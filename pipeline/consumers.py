"""The chat WebSocket at ``/ws/chat/`` (docs/protocol.md): a relay.

It validates each frame (``pipeline.protocol``), hands it to ``pipeline.actions`` and
forwards what the turn runtime and the channel layer send it. Errors become ``error``
frames and never close the socket; a socket without an authenticated user (session or API
token, ``accounts.ws_auth``) is refused, and one whose session ends or whose token is revoked
(``session.ended`` from the accounts app) closes with 4401, as does a token socket when its
token expires.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import redis
from channels.generic.websocket import AsyncWebsocketConsumer

from accounts.ws_auth import accepted_subprotocol, token_seconds_left, token_socket_groups
from openmates.vault import VaultError
from pipeline import actions, runtime
from pipeline import events as ev
from pipeline.protocol import VAULT_SETUP_FAULT, ErrorCode, FrameError, parse_frame

logger = logging.getLogger(__name__)

SESSION_ENDED = 4401
NOT_FOUND = 4404


class ChatConsumer(AsyncWebsocketConsumer):
    """One client socket. ``registry_name`` lets tests run two "processes" in one loop."""

    registry_name = "default"

    async def connect(self) -> None:
        self.user: Any = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=SESSION_ENDED)
            return
        self.registry = runtime.registry(self.registry_name)
        self.following: set[str] = set()
        self.last_sequence: dict[str, int] = {}
        # A token socket also joins its token's group: revoking the token closes it (4401).
        self.groups_joined = [runtime.user_group(self.user.pk), *token_socket_groups(self.scope)]
        await self.registry.ensure_started()
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept(accepted_subprotocol(self.scope))
        if (seconds := token_seconds_left(self.scope)) is not None:  # token expiry: 4401
            self.expiry = asyncio.get_running_loop().call_later(seconds, self._token_expired)
        await self.deliver((await actions.task_active(self)).to_frame())

    def _token_expired(self) -> None:
        self.expiry_close = asyncio.ensure_future(self.close(code=SESSION_ENDED))

    async def disconnect(self, code: int) -> None:
        if getattr(self, "expiry", None) is not None:
            self.expiry.cancel()
        if getattr(self, "registry", None) is not None:
            self.registry.unsubscribe(self)
            for group in self.groups_joined:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            await actions.dispatch(self, parse_frame(text_data, bytes_data))
        except FrameError as error:
            await self.deliver(
                ev.Error(code=error.code, message=error.message, **error.ids).to_frame()
            )
        except VaultError as error:
            if error.is_outage:
                logger.warning("frame failed: Vault unavailable", exc_info=True)
                await self._error(ErrorCode.VAULT_UNAVAILABLE, "The key service is unavailable.")
            else:
                logger.error("frame failed: Vault refused: %s", error)
                await self._error(ErrorCode.INTERNAL, VAULT_SETUP_FAULT)
        except redis.RedisError:
            logger.warning("frame failed: Redis unavailable", exc_info=True)
            await self._error(ErrorCode.CACHE_UNAVAILABLE, "The cache is unavailable.")
        except Exception:
            logger.exception("frame failed")
            await self._error(ErrorCode.INTERNAL, "Something went wrong.")

    async def _error(self, code: ErrorCode, message: str) -> None:
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

    async def session_ended(self, message: dict[str, Any]) -> None:
        await self.close(code=int(message.get("code", SESSION_ENDED)))


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Any WebSocket path without a route: the handshake is refused with close code 4404.

    (Without it Channels' URLRouter raises "No route found", an HTTP 500.) Servers answer
    a close before accept with HTTP 403.
    """

    async def connect(self) -> None:
        await self.close(code=NOT_FOUND)
