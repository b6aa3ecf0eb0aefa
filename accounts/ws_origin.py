"""Same-origin rule for WebSocket handshakes that carry the session cookie.

``AllowedHostsOriginValidator`` (docs/protocol.md §2: the ``Origin`` must name an allowed host)
compares only the Origin's host with ``ALLOWED_HOSTS``; port and scheme are ignored. A
page served by another program on another port of the same host (``http://127.0.0.1:9999``)
is same-*site* for the browser, which therefore sends the ``SameSite=Lax`` session cookie
with its handshake: that page could read the user's chats over a socket of its own
(cross-site WebSocket hijacking).

:class:`CookieOriginGuard` adds the rule Django's CSRF check applies to unsafe HTTP
requests, for handshakes that would be signed in by the session cookie: the Origin's
``host[:port]`` must equal the handshake's ``Host`` header, or be one of
``CSRF_TRUSTED_ORIGINS`` (which deployments behind a proxy set anyway). Handshakes that
offer an API token carry no ambient credential and keep the host rule of docs/protocol.md §2 only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings

from accounts.ws_auth import TOKEN_SUBPROTOCOL_PREFIX


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin1")
    return None


def _offers_token(scope: dict[str, Any]) -> bool:
    authorization = _header(scope, b"authorization") or ""
    if authorization.lower().startswith("bearer "):
        return True
    return any(str(p).startswith(TOKEN_SUBPROTOCOL_PREFIX) for p in scope.get("subprotocols", ()))


def _netloc(origin: str) -> str:
    return urlsplit(origin.strip()).netloc.lower()


def cookie_origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether a handshake may go on to the session-cookie sign-in.

    True for handshakes without the session cookie, with an API token, or without a
    ``Host`` header (no browser sends one without it); otherwise the Origin must name the
    handshake's own ``host[:port]`` or a ``CSRF_TRUSTED_ORIGINS`` entry.
    """
    cookie = _header(scope, b"cookie") or ""
    if f"{settings.SESSION_COOKIE_NAME}=" not in cookie or _offers_token(scope):
        return True
    host = (_header(scope, b"host") or "").strip().lower()
    if not host:
        return True
    origin = _netloc(_header(scope, b"origin") or "")
    trusted = {_netloc(entry) for entry in settings.CSRF_TRUSTED_ORIGINS}
    return bool(origin) and (origin == host or origin in trusted)


class CookieOriginGuard:
    """ASGI middleware: refuses (HTTP 403, before accept) a cookie handshake from another
    origin; see :func:`cookie_origin_allowed`."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        """Pass the handshake on, or deny it."""
        if cookie_origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
