"""accounts.ws_origin: a handshake signed in by the session cookie must come from the
server's own origin (host and port), or a trusted one; token handshakes keep the host rule."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator

from accounts.services import api_token_create
from openmates.asgi import application
from pipeline import runtime
from tests.pipeline.conftest import session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

HOST = (b"host", b"127.0.0.1:8000")


@pytest.fixture
async def handshake() -> AsyncIterator[Callable[..., Any]]:
    """``await handshake(headers)`` → ``(connected, first frame or close code)``."""
    channel_layers.backends.clear()
    opened: list[WebsocketCommunicator] = []

    async def connect(headers: list[tuple[bytes, bytes]]) -> tuple[bool, Any]:
        communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        opened.append(communicator)
        connected, detail = await communicator.connect(timeout=5)
        if connected:
            detail = json.loads(await communicator.receive_from(timeout=5))["type"]
        return connected, detail

    yield connect
    for communicator in opened:
        await asyncio.wait_for(communicator.disconnect(), 20)
    await asyncio.wait_for(runtime.registry("default").stop(), 20)
    layer = channel_layers.backends.pop("default", None)
    if layer is not None:
        await layer.close_pools()


async def _cookie(user: Any) -> tuple[bytes, bytes]:
    return (b"cookie", await sync_to_async(session_cookie)(user))


async def test_a_cookie_handshake_from_the_servers_own_origin_is_accepted(
    handshake: Any, owner: Any
) -> None:
    origin = (b"origin", b"http://127.0.0.1:8000")
    assert await handshake([origin, HOST, await _cookie(owner)]) == (True, "task.active")


@pytest.mark.parametrize(
    "origin", [b"http://127.0.0.1:9999", b"http://localhost:1", b"http://127.0.0.1"]
)
async def test_a_cookie_handshake_from_another_port_of_an_allowed_host_is_refused(
    handshake: Any, owner: Any, origin: bytes
) -> None:
    connected, code = await handshake([(b"origin", origin), HOST, await _cookie(owner)])
    # Denied before accept: Daphne answers the handshake with HTTP 403.
    assert (connected, code) == (False, 1000)


async def test_a_trusted_origin_may_differ_from_the_host_header(
    handshake: Any, owner: Any, settings: Any
) -> None:
    # Behind a proxy the Host header can be the internal address.
    # (The Origin's host must still be in ALLOWED_HOSTS, read when the app was built.)
    settings.CSRF_TRUSTED_ORIGINS = ["https://localhost"]
    origin = (b"origin", b"https://localhost")
    assert await handshake([origin, HOST, await _cookie(owner)]) == (True, "task.active")


async def test_a_token_handshake_keeps_the_allowed_host_rule_only(
    handshake: Any, owner: Any
) -> None:
    _, raw = await sync_to_async(api_token_create)(user=owner, name="script")
    bearer = (b"authorization", f"Bearer {raw}".encode())
    origin = (b"origin", b"http://127.0.0.1:9999")
    assert await handshake([origin, HOST, bearer]) == (True, "task.active")
