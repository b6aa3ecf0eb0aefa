"""Daphne's WebSocket connections as RFC 6455 asks and the chat consumer needs.

Daphne builds its autobahn factory with two defaults that show on the wire:

* ``failByDrop``: a connection the server fails (a text frame that is not UTF-8, a
  protocol violation, a message over the size limit) is dropped at the TCP level, so the
  client sees a reset instead of the close frame RFC 6455 section 7.1.7 asks for (1007
  for invalid UTF-8, 1002, 1009). Here the closing handshake is performed.
* a send after the client's close frame arrived, while the TCP connection still stands,
  raises autobahn's ``Disconnected`` into the application (the consumer is still working
  through frames that came before the close) and Daphne logs an unhandled traceback.
  Such sends are dropped, as Daphne drops the ones after the disconnect.

Daphne's command line has no option for either, and it builds the factory in
``Server.run`` after importing the application: ``openmates.asgi`` calls :func:`install`,
which changes nothing in a process Daphne does not serve (another ASGI server, tests).
"""

from __future__ import annotations

import sys
from typing import Any

from daphne.ws_protocol import WebSocketFactory, WebSocketProtocol


class ClosingAwareProtocol(WebSocketProtocol):
    """Daphne's protocol, dropping what the application sends once the closing began."""

    def serverSend(self, content: Any, binary: bool = False) -> None:  # noqa: N802 (Daphne's name)
        """Send one message, or nothing when the connection is closing or closed."""
        if self.state in (self.STATE_CLOSING, self.STATE_CLOSED):
            return
        super().serverSend(content, binary)


class ClosingAwareFactory(WebSocketFactory):
    """Daphne's factory with the closing handshake on failure and :class:`ClosingAwareProtocol`."""

    protocol = ClosingAwareProtocol

    def resetProtocolOptions(self) -> None:  # noqa: N802 (autobahn's name)
        """autobahn's defaults, except that a failed connection is closed, not dropped."""
        super().resetProtocolOptions()
        self.failByDrop = False


def install() -> None:
    """Make Daphne build :class:`ClosingAwareFactory` (call before ``Server.run``).

    Only where Daphne's server module is already loaded, as its command line loads it
    before the application: importing it elsewhere would install a Twisted reactor.
    """
    server = sys.modules.get("daphne.server")
    if server is not None:
        setattr(server, "WebSocketFactory", ClosingAwareFactory)  # noqa: B010 (a module's global)
