"""Daphne's WebSocket protocol as ``openmates.daphne_ws`` sets it up, without a network.

Each check runs in a fresh interpreter: building an autobahn factory installs a Twisted
reactor, which the test process must not get (the live tests run Daphne themselves).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from openmates.settings import BASE_DIR

PREAMBLE = """
from daphne.ws_protocol import WebSocketFactory
from openmates.daphne_ws import ClosingAwareFactory


def closed(factory_class):
    protocol = factory_class(None).buildProtocol(None)
    protocol.client_addr = None
    # The client's close frame was answered; the TCP connection is not gone yet.
    protocol.state = protocol.STATE_CLOSED
    return protocol


def send(protocol):
    try:
        protocol.handle_reply({"type": "websocket.send", "text": "late"})
    except Exception as error:
        return type(error).__name__
    return "dropped"
"""


def _run(code: str) -> str:
    script = PREAMBLE + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_send_after_the_close_is_dropped_where_daphne_raises() -> None:
    answer = _run("print(send(closed(WebSocketFactory)), send(closed(ClosingAwareFactory)))")
    assert answer == "Disconnected dropped"


def test_a_failed_connection_gets_the_closing_handshake_not_a_drop() -> None:
    answer = _run("print(WebSocketFactory(None).failByDrop, ClosingAwareFactory(None).failByDrop)")
    assert answer == "True False"


def test_install_swaps_daphnes_factory_only_where_daphne_is_loaded() -> None:
    answer = _run(
        """
        import sys
        from openmates import daphne_ws
        daphne_ws.install()
        alone = "daphne.server" in sys.modules
        import daphne.server
        daphne_ws.install()
        print(alone, daphne.server.WebSocketFactory.__name__)
        """
    )
    assert answer == "False ClosingAwareFactory"
