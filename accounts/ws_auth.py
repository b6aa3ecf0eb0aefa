"""WebSocket authentication by API token, for clients without a browser session.

A client presents its token in the handshake, either as ``Authorization: Bearer <token>``
or, where it cannot set headers (a browser's ``WebSocket``), as the subprotocol
``openmates.token.<token>``. Because a server must answer a subprotocol offer by selecting
one of the offered names, and echoing the token would send the secret back, such a client
also offers :data:`PROTOCOL_SUBPROTOCOL` (``openmates.v1``) and the chat socket accepts
with that::

    new WebSocket(url, ["openmates.v1", "openmates.token." + token])

A presented token must authenticate: a malformed, unknown, revoked or expired token (or
two different ones) leaves the socket anonymous, and the chat consumer refuses anonymous
handshakes (HTTP 403, close code 4401) even when a session cookie came along. Without a
token the session decides, as before. The ``Origin`` check (``AllowedHostsOriginValidator``)
stays outside this middleware, so it runs first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from accounts.services import api_token_authenticate, api_token_socket_group

TOKEN_SUBPROTOCOL_PREFIX = "openmates.token."  # noqa: S105 (a name, not a secret)
PROTOCOL_SUBPROTOCOL = "openmates.v1"
# The id of the ``ApiToken`` a socket authenticated with (absent for session sockets).
SCOPE_TOKEN_ID = "api_token_id"  # noqa: S105 (a scope key, not a secret)
# When that token expires (an aware datetime, or None for a token without expiry).
SCOPE_TOKEN_EXPIRES_AT = "api_token_expires_at"  # noqa: S105 (a scope key, not a secret)


def offered_tokens(scope: dict[str, Any]) -> list[str]:
    """Every token the handshake presents (Bearer headers, then token subprotocols)."""
    tokens = []
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, credentials = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer":
                tokens.append(credentials.strip())
    tokens.extend(
        subprotocol.removeprefix(TOKEN_SUBPROTOCOL_PREFIX)
        for subprotocol in scope.get("subprotocols", ())
        if subprotocol.startswith(TOKEN_SUBPROTOCOL_PREFIX)
    )
    return tokens


class ApiTokenAuthMiddleware(BaseMiddleware):
    """Sets ``scope["user"]`` (and :data:`SCOPE_TOKEN_ID`, :data:`SCOPE_TOKEN_EXPIRES_AT`)
    from a presented API token.

    Runs inside ``AuthMiddlewareStack`` so that a token, when present, replaces whatever
    the session said. The lookup and the ``last_used_at`` write (at most once a minute)
    are one sync call through ``database_sync_to_async``, as Channels' own session lookup
    is: it closes stale connections around the call (handing them back to a pool), and the
    token's user comes loaded, so nothing lazy is followed on the event loop.
    """

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        """Authenticate the handshake by token when one is presented, then call the inner app."""
        tokens = set(offered_tokens(scope))
        if tokens:
            token = None
            if len(tokens) == 1:
                token = await database_sync_to_async(api_token_authenticate)(tokens.pop())
            if token is None:
                scope = dict(scope, user=AnonymousUser())
            else:
                token_scope = {SCOPE_TOKEN_ID: token.pk, SCOPE_TOKEN_EXPIRES_AT: token.expires_at}
                scope = dict(scope, user=token.user, **token_scope)
        return await super().__call__(scope, receive, send)


def ApiTokenAuthMiddlewareStack(inner: Any) -> Any:  # noqa: N802 (named like Channels' stacks)
    """Session authentication (cookies, sessions, user) with API tokens taking precedence."""
    return AuthMiddlewareStack(ApiTokenAuthMiddleware(inner))


def accepted_subprotocol(scope: dict[str, Any]) -> str | None:
    """The subprotocol to accept with: ``openmates.v1`` when offered, else None.

    Never a token subprotocol: that would echo the secret in the handshake answer.
    """
    return PROTOCOL_SUBPROTOCOL if PROTOCOL_SUBPROTOCOL in scope.get("subprotocols", ()) else None


def token_socket_groups(scope: dict[str, Any]) -> list[str]:
    """The channel-layer groups a socket joins for its token (revocation closes them)."""
    token_id = scope.get(SCOPE_TOKEN_ID)
    return [] if token_id is None else [api_token_socket_group(token_id)]


def token_seconds_left(scope: dict[str, Any]) -> float | None:
    """Seconds until the socket's API token expires (0.0 if it already has), else None.

    None for a session socket and for a token without expiry. The chat consumer closes a
    token socket with 4401 when this runs out, as REST answers 401 from then on.
    """
    expires_at: datetime | None = scope.get(SCOPE_TOKEN_EXPIRES_AT)
    if expires_at is None:
        return None
    return max(0.0, (expires_at - timezone.now()).total_seconds())
