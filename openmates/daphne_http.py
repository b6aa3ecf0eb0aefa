"""Daphne's HTTP side answers what it used to drop, and refuses a large body before it is read.

Twisted's ``HTTPChannel``, which Daphne serves HTTP with:

* reads the request line and each header line with ``LineReceiver``, whose limit is
  ``MAX_LENGTH`` (16384) bytes a line; past it ``lineLengthExceeded`` drops the TCP
  connection without a word. Here the channel answers 414 ``uri_too_long`` for the
  request line, 431 ``headers_too_large`` for a header line (RFC 9110, RFC 6585);
* answers other malformed requests (too many headers, a bad request line, a bad
  ``Content-Length``) with a bare ``400 Bad Request`` and no body. Here the body is the
  JSON error of the REST API, code ``bad_request``;
* hands a request to Daphne only once its whole body has arrived (into memory, then a
  temporary file), so :mod:`openmates.body_limit` in the ASGI application sees an
  oversized body only after it was uploaded whole: a 200 MB body to any path was read,
  spooled to disk and then refused. Here Daphne's request refuses it at the transport:
  a declared ``Content-Length`` above ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is answered 413
  ``request_too_large`` as soon as the headers are in, with nothing of the body kept, and
  a body without one (chunked) at the first chunk that passes the limit. No path takes a
  larger body (Django refuses a larger form or JSON body anyway); ``/v1/`` gets OpenAI's
  error shape, as in the ASGI layer (docs/api.md §3).

Every refusal closes the connection after the answer. Bodies follow the error contract of
docs/architecture.md §11. ``openmates.asgi`` calls :func:`install`, which changes nothing
in a process Daphne does not serve (tests, other ASGI servers: there
:mod:`openmates.body_limit` bounds bodies as they stream in).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["answer_for_long_line", "bad_request_answer", "install", "too_large_answer"]

_STATUS = {
    "uri_too_long": (414, "URI Too Long", "The request line is too long."),
    "headers_too_large": (431, "Request Header Fields Too Large", "A request header is too long."),
}


def _response(status: int, reason: str, body: dict[str, Any]) -> bytes:
    """A whole HTTP/1.1 response with a JSON ``body`` that closes the connection."""
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + data


def answer_for_long_line(line: bytes) -> bytes:
    """The response to a request whose line ``line`` (its first bytes, as Twisted buffered
    them) passed the line limit: 414 when it is the request line (its first word is a
    method, not a ``Name:`` header), else 431."""
    first = line.split(b" ", 1)[0]
    code = "headers_too_large" if b":" in first else "uri_too_long"
    status, reason, message = _STATUS[code]
    return _response(status, reason, {"code": code, "message": message})


def bad_request_answer() -> bytes:
    """The response to a request Twisted cannot parse: 400 ``bad_request``."""
    from openmates.api_errors import BAD_REQUEST_BODY  # needs Django's apps: imported late

    return _response(400, "Bad Request", BAD_REQUEST_BODY)


def too_large_answer(path: bytes) -> bytes:
    """The 413 response to a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` sent to ``path``
    (its raw request target): OpenAI's error shape under ``/v1/``, else ``{"code",
    "message"}``."""
    from openmates.api_errors import request_too_large_body

    body: dict[str, Any] = request_too_large_body()
    if path.startswith(b"/v1/"):
        body = {"error": {**body, "type": "invalid_request_error", "param": None}}
    return _response(413, "Content Too Large", body)


def _line_too_long(channel: Any, line: bytes) -> None:
    channel.transport.write(answer_for_long_line(line))
    channel.loseConnection()


def _bad_request(channel: Any) -> None:
    channel.transport.write(bad_request_answer())
    channel.loseConnection()


def _bounded_request_class(base: type[Any]) -> type[Any]:
    """Daphne's ``WebRequest`` refusing a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` as it
    arrives (declared or counted), never handing such a request to the application."""
    from django.conf import settings

    class BoundedWebRequest(base):
        bounded = True
        refused = False
        received = 0

        def gotLength(self, length: int | None) -> None:  # noqa: N802 (Twisted's name)
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if limit is not None and length is not None and length > limit:
                self._refuse()  # before a buffer or a temporary file is made for it
                return
            super().gotLength(length)

        def handleContentChunk(self, data: bytes) -> None:  # noqa: N802 (Twisted's name)
            if self.refused:
                return
            self.received += len(data)
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if limit is not None and self.received > limit:
                self._refuse()
                return
            super().handleContentChunk(data)

        def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:  # noqa: N802
            if not self.refused:
                super().requestReceived(command, path, version)

        def _refuse(self) -> None:
            self.refused = True
            channel = self.channel
            # The request target as the channel read it (Request.path is set only when
            # the whole request has arrived).
            path = getattr(channel, "_path", b"") or b""
            channel.transport.write(too_large_answer(path))
            channel.transport.loseConnection()

    return BoundedWebRequest


def install() -> None:
    """Make Daphne's HTTP side answer over-long lines and malformed requests with JSON and
    refuse an oversized body before reading it (call before ``Server.run``).

    Only where Daphne's server module is already loaded (its command line loads it
    before the application).
    """
    if "daphne.server" not in sys.modules:
        return
    from daphne import http_protocol
    from twisted.web import http

    setattr(http.HTTPChannel, "lineLengthExceeded", _line_too_long)  # noqa: B010 (Twisted's hook)
    setattr(http.HTTPChannel, "_respondToBadRequestAndDisconnect", _bad_request)  # noqa: B010
    if not getattr(http_protocol.WebRequest, "bounded", False):
        # Daphne's factory builds requests from this module global at each connection.
        http_protocol.WebRequest = _bounded_request_class(http_protocol.WebRequest)
