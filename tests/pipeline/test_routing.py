"""WebSocket routing (openmates/routing.py): unknown paths are refused, not a 500."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from openmates.asgi import application
from pipeline.consumers import NOT_FOUND

# The handshake's session middleware closes stale connections of its worker thread, which
# an earlier test may have left open: that needs database access even here.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("path", ["/ws/nope/", "/", "/ws/chat/extra/", "/ws/chat"])
async def test_a_socket_to_an_unknown_path_is_refused_with_4404(path: str) -> None:
    communicator = WebsocketCommunicator(
        application, path, headers=[(b"origin", b"http://localhost")]
    )
    connected, code = await communicator.connect()
    assert (connected, code) == (False, NOT_FOUND)
    await communicator.disconnect()


async def test_the_chat_path_still_reaches_the_chat_consumer() -> None:
    # Anonymous, so ChatConsumer itself refuses with its own code (4401), not 4404.
    communicator = WebsocketCommunicator(
        application, "/ws/chat/", headers=[(b"origin", b"http://localhost")]
    )
    connected, code = await communicator.connect()
    assert (connected, code) == (False, 4401)
    await communicator.disconnect()
