"""API tokens on /ws/chat/ against a live Daphne with the ``websockets`` client.

``WebsocketCommunicator`` skips the HTTP handshake; here a real client checks it: the
server must answer a subprotocol offer with one of the offered names (``openmates.v1``,
never the token), and refusals are HTTP 403 before the socket opens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from accounts.services import api_token_create, api_token_revoke
from tests.ui.conftest import daphne_serving

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

WAIT_S = 10.0


@pytest.fixture(scope="module")
def base(django_db_setup: Any, tmp_path_factory: Any) -> Iterator[str]:
    """The base URL of a live Daphne serving the app on the test database."""
    with daphne_serving({}, tmp_path_factory.mktemp("daphne-tokens")) as url:
        yield url


def _uri(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws/chat/"


async def _first(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
    return frame


async def test_a_bearer_header_opens_a_live_socket(base: str, owner: Any) -> None:
    _, raw = await sync_to_async(api_token_create)(user=owner, name="cli")
    headers = {"Origin": base, "Authorization": f"Bearer {raw}"}
    async with connect(_uri(base), additional_headers=headers) as ws:
        assert ws.subprotocol is None
        assert await _first(ws) == {"type": "task.active", "tasks": []}


async def test_the_token_subprotocol_is_answered_with_openmates_v1(base: str, owner: Any) -> None:
    _, raw = await sync_to_async(api_token_create)(user=owner, name="browser-like")
    offered = ["openmates.v1", f"openmates.token.{raw}"]
    async with connect(
        _uri(base),
        additional_headers={"Origin": base},
        subprotocols=offered,  # type: ignore[arg-type]
    ) as ws:
        assert ws.subprotocol == "openmates.v1"
        assert ws.response is not None
        assert ws.response.headers["Sec-WebSocket-Protocol"] == "openmates.v1"
        assert (await _first(ws))["type"] == "task.active"


@pytest.mark.parametrize("with_origin", [True, False])
async def test_bad_tokens_and_missing_origins_are_refused_with_403(
    base: str, owner: Any, with_origin: bool
) -> None:
    _, raw = await sync_to_async(api_token_create)(user=owner, name="cli")
    token = "om_0123456789ab_" + "a" * 43 if with_origin else raw
    headers = {"Authorization": f"Bearer {token}"}
    if with_origin:
        headers["Origin"] = base
    with pytest.raises(InvalidStatus) as refused:
        async with connect(_uri(base), additional_headers=headers):
            pass
    assert refused.value.response.status_code == 403


async def test_revoking_closes_the_live_socket_with_4401(base: str, owner: Any) -> None:
    token, raw = await sync_to_async(api_token_create)(user=owner, name="cli")
    headers = {"Origin": base, "Authorization": f"Bearer {raw}"}
    async with connect(_uri(base), additional_headers=headers) as ws:
        assert (await _first(ws))["type"] == "task.active"
        await sync_to_async(api_token_revoke)(token=token)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401
