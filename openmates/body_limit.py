"""Request bodies of the programmatic paths are bounded at the ASGI layer, before Django
reads them.

Django's ASGI handler reads a body whole (into a spooled file) and then trusts
``Content-Length``: a chunked body (no ``Content-Length``) was read and then parsed as
empty, and a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` was read in full before the 413.
:class:`BodyLimit` wraps the HTTP application so that, for paths under ``/api/`` (the
REST API), ``/v1/`` (the OpenAI-compatible API, docs/api.md §3) and ``/channels/`` (the
chat platforms' webhooks, docs/channels.md §3):

* a declared ``Content-Length`` above the limit is answered 413 ``request_too_large`` at
  once, without receiving the body (a malformed one is 400 ``bad_request``);
* a body without ``Content-Length`` is received here up to the limit (past it: 413 at once,
  nothing more received) and handed on with its ``content-length`` in the scope, so
  Django parses what was sent.

Under Daphne, which hands a request to the application only once its body has arrived
whole, :mod:`openmates.daphne_http` refuses an oversized body earlier, at the transport;
this middleware is what bounds bodies under ASGI servers that stream them.

The error bodies are each path's own contract: ``{"code", "message"}`` under ``/api/`` and
``/channels/``, OpenAI's ``{"error": {"message", "type", "param", "code"}}`` under ``/v1/``.
Other paths and other scope types pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from openmates.api_errors import BAD_REQUEST_BODY, request_too_large_body

Scope = dict[str, Any]
Message = dict[str, Any]
# Any in the messages: Django's handler and Channels each type them their own way.
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _TooLargeError(Exception):
    """The body received so far passed the limit."""


class _DisconnectedError(Exception):
    """The client went away before the body ended."""


def _openai_error(body: dict[str, str]) -> dict[str, Any]:
    """A ``{"code", "message"}`` refusal in OpenAI's error shape (docs/api.md §3)."""
    return {
        "error": {
            "message": body["message"],
            "type": "invalid_request_error",
            "param": None,
            "code": body["code"],
        }
    }


def _refusals(path: str) -> tuple[dict[str, Any], Callable[[], dict[str, Any]]] | None:
    """``(bad request body, too-large body factory)`` for a bounded path, else None."""
    if path.startswith(("/api/", "/channels/")):
        return BAD_REQUEST_BODY, request_too_large_body
    if path.startswith("/v1/"):
        return _openai_error(BAD_REQUEST_BODY), lambda: _openai_error(request_too_large_body())
    return None


class BodyLimit:
    """ASGI middleware: ``/api/``, ``/v1/`` and ``/channels/`` bodies within
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, each with a ``content-length`` Django can trust."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap ``app``, the HTTP application (Django's)."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one connection scope: refuse, buffer or pass through as described above."""
        refusals = _refusals(str(scope.get("path", ""))) if scope["type"] == "http" else None
        if refusals is None:
            await self.app(scope, receive, send)
            return
        bad_request, too_large = refusals
        # Read per request, not at import, so override_settings applies.
        limit: int | None = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            declared = _declared_length(scope.get("headers", []))
        except ValueError:
            await _answer(send, 400, bad_request)
            return
        if declared is not None:
            if limit is not None and declared > limit:
                await _answer(send, 413, too_large())
                return
            await self.app(scope, receive, send)
            return
        try:
            body = await _receive_within(receive, limit)
        except _TooLargeError:
            await _answer(send, 413, too_large())
            return
        except _DisconnectedError:
            return
        # Transfer-Encoding goes: the body handed on is whole, and its length is stated.
        headers = [
            (name, value)
            for name, value in scope.get("headers", [])
            if name.lower() not in (b"content-length", b"transfer-encoding")
        ]
        headers.append((b"content-length", str(len(body)).encode("ascii")))
        await self.app({**scope, "headers": headers}, _replay(body, receive), send)


def _declared_length(headers: Any) -> int | None:
    """The request's ``Content-Length``, None without one.

    Raises:
        ValueError: it is not a decimal number, or several disagree.
    """
    values = {value.strip() for name, value in headers if name.lower() == b"content-length"}
    if not values:
        return None
    if len(values) > 1 or not all(value.isdigit() for value in values):
        raise ValueError("malformed Content-Length")
    return int(values.pop())


async def _receive_within(receive: Receive, limit: int | None) -> bytes:
    """The whole body, received chunk by chunk; stops at the first chunk past ``limit``.

    Raises:
        _TooLargeError: more than ``limit`` bytes arrived.
        _DisconnectedError: the client disconnected first.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _DisconnectedError
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if limit is not None and size > limit:
            raise _TooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` as one message, then defers to ``receive`` (Django
    keeps listening for the disconnect while it answers)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send: Send, status: int, payload: dict[str, Any]) -> None:
    """Send a JSON error response."""
    content = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})
