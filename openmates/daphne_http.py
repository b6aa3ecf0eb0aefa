"""Daphne's HTTP channel answers a request whose request line or a header line is too long.

Twisted's ``HTTPChannel`` reads the request line and each header line with
``LineReceiver``, whose limit is ``MAX_LENGTH`` (16384) bytes a line; past it
``lineLengthExceeded`` drops the TCP connection without a word, so a client (or a proxy)
sees a reset instead of an answer. Here the channel answers first, with the status RFC
9110 (414) and RFC 6585 (431) name and the JSON error body of the REST API
(docs/architecture.md §11): 414 ``uri_too_long`` for the request line, 431 ``headers_too_large``
for a header line; then it closes the connection. (All headers together past
``totalHeadersSize`` already get Twisted's plain 400.)

``openmates.asgi`` calls :func:`install`, which changes nothing in a process Daphne does
not serve (importing Twisted's HTTP module elsewhere would not hurt, but tests and other
ASGI servers have no use for it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["answer_for_long_line", "install"]

_STATUS = {
    "uri_too_long": (414, b"URI Too Long", "The request line is too long."),
    "headers_too_large": (
        431,
        b"Request Header Fields Too Large",
        "A request header is too long.",
    ),
}


def answer_for_long_line(line: bytes) -> bytes:
    """The whole HTTP/1.1 response to a request whose line ``line`` (its first bytes, as
    Twisted buffered them) passed the line limit: 414 when it is the request line (its
    first word is a method, not a ``Name:`` header), else 431. ``Connection: close``."""
    first = line.split(b" ", 1)[0]
    code = "headers_too_large" if first.endswith(b":") or b":" in first else "uri_too_long"
    status, reason, message = _STATUS[code]
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} ".encode() + reason + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n"
    )
    return head + body


def _line_too_long(channel: Any, line: bytes) -> None:
    channel.transport.write(answer_for_long_line(line))
    channel.loseConnection()


def install() -> None:
    """Make Twisted's HTTP channel answer an over-long line (call before ``Server.run``).

    Only where Daphne's server module is already loaded (its command line loads it
    before the application).
    """
    if "daphne.server" not in sys.modules:
        return
    from twisted.web import http

    setattr(http.HTTPChannel, "lineLengthExceeded", _line_too_long)  # noqa: B010 (Twisted's hook)
