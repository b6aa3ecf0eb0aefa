"""Fixtures for the pipeline tests: signed-in WebSocket clients against the real stack.

``ws_client(user, registry="default")`` opens ``/ws/chat/`` through the project's ASGI
application (origin check, session auth) with a real session cookie; a registry name
other than "default" serves the socket from a second "process" (its own turn registry
and control channel, sharing Redis, PostgreSQL and Vault), which is how the cross-process
tests run two servers in one event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.auth import AuthMiddlewareStack
from channels.layers import channel_layers
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.cached_db import SessionStore
from django.urls import path

from openmates.db import db_call
from pipeline import runtime
from pipeline.consumers import ChatConsumer
from pipeline.ids import new_id
from pipeline.turn import instance_context_forget

ORIGIN = b"http://localhost"
RECEIVE_TIMEOUT_S = 5.0


def envelope() -> str:
    """A syntactically valid docs/crypto.md §3 client envelope (random bytes)."""
    return base64.b64encode(b"\x01" + os.urandom(8 + 12 + 32)).decode()


def session_cookie(user: Any) -> bytes:
    """A real session for ``user`` (what signing in creates), as a Cookie header value."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}".encode()


def _application(registry_name: str) -> Any:
    if registry_name == "default":
        from openmates.asgi import application

        return application
    consumer = ChatConsumer.as_asgi(registry_name=registry_name)
    return AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter([path("ws/chat/", consumer)])))


class Client:
    """A connected test client: send frames, receive frames in order."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[dict[str, Any]] = []

    async def send(self, **frame: Any) -> None:
        await self.communicator.send_to(text_data=json.dumps(frame))

    async def send_text(self, text: str) -> None:
        await self.communicator.send_to(text_data=text)

    async def recv(self, wait_s: float = RECEIVE_TIMEOUT_S) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await self.communicator.receive_from(timeout=wait_s))
        self.frames.append(frame)
        return frame

    async def until(self, kind: str, wait_s: float = RECEIVE_TIMEOUT_S) -> list[dict[str, Any]]:
        """Frames up to and including the first of type ``kind``."""
        got: list[dict[str, Any]] = []
        while True:
            try:
                frame = await self.recv(wait_s)
            except TimeoutError:
                raise AssertionError(f"no {kind!r} within {wait_s} s; got {got}") from None
            got.append(frame)
            if frame["type"] == kind:
                return got

    async def nothing(self, wait_s: float = 0.2) -> bool:
        return await self.communicator.receive_nothing(timeout=wait_s)

    async def close(self) -> None:
        await self.communicator.disconnect()


@pytest.fixture
async def ws_client() -> AsyncIterator[Callable[..., Any]]:
    """Factory ``await ws_client(user, registry="default")`` → a connected :class:`Client`."""
    clients: list[Client] = []
    registries: set[str] = set()
    instance_context_forget()
    # A fresh channel layer per test: channels-redis keeps per-process receive state that
    # must not outlive the test's event loop.
    channel_layers.backends.clear()

    async def connect(
        user: Any, registry: str = "default", *, expect_active: bool = True
    ) -> Client:
        cookie = await db_call(session_cookie, user)  # hands the connection back
        communicator = WebsocketCommunicator(
            _application(registry), "/ws/chat/", headers=[(b"origin", ORIGIN), (b"cookie", cookie)]
        )
        connected, code = await communicator.connect(timeout=RECEIVE_TIMEOUT_S)
        assert connected, f"handshake refused ({code})"
        client = Client(communicator)
        clients.append(client)
        registries.add(registry)
        if expect_active:
            active = await client.recv()
            assert active["type"] == "task.active"
        return client

    yield connect
    for name in registries:
        await asyncio.wait_for(runtime.registry(name).wait_idle(), 20)
    for client in clients:
        await asyncio.wait_for(client.close(), 20)
    for name in registries:
        await asyncio.wait_for(runtime.registry(name).stop(), 20)
    layer = channel_layers.backends.pop("default", None)
    if layer is not None:
        await layer.close_pools()


@pytest.fixture
def keyed_user_factory(db: Any) -> Callable[..., Any]:
    """Users with a transit key (their AI cache and snapshots are sealed under it)."""
    from openmates import vault
    from tests.factories import UserFactory

    def make(username: str) -> Any:
        user: Any = UserFactory(username=username)
        vault.ensure_key(vault.user_key_name(user.pk))
        return user

    return make


@pytest.fixture
def user(owner: Any) -> Any:
    """The instance's owner, with the transit key the server-side caches need."""
    from openmates import vault

    vault.ensure_key(vault.user_key_name(owner.pk))
    return owner


@pytest.fixture
def chat(chat_factory: Any, user: Any) -> Any:
    """A chat of ``user`` on the test instance."""
    return chat_factory(user)


@pytest.fixture
def chat_factory(instance: Any) -> Callable[..., Any]:
    """``chat_factory(user)`` → a client-encrypted chat of ``instance`` owned by ``user``."""
    from chats.services import chat_create

    def make(user: Any, chat_instance: Any = None) -> Any:
        return chat_create(
            user=user,
            chat_id=new_id(),
            instance=chat_instance or instance,
            encrypted_chat_key=envelope(),
        )

    return make


async def _slow_lookup(params: dict[str, Any], context: Any) -> dict[str, Any]:
    await asyncio.sleep(10)
    return {"success": True, "result": {"query": params["query"]}}


@pytest.fixture
def slow_tool(instance: Any) -> str:
    """A registered tool that takes 10 s, switched on for ``instance`` (for skill.cancel)."""
    from skills.models import InstanceTool
    from skills.registry import get_tool, register_tool

    if get_tool("slow_lookup") is None:
        register_tool(
            name="slow_lookup",
            description="Look something up slowly (test tool).",
            category="test",
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look up."}},
                "required": ["query"],
            },
            execute=_slow_lookup,
        )
    InstanceTool.objects.update_or_create(
        instance=instance, name="slow_lookup", defaults={"enabled": True}
    )
    instance_context_forget()
    return "slow_lookup"
