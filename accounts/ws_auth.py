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

An open socket re-checks its sign-in (:class:`SignInCheck`): the events that close it when
a session ends or a token is revoked travel through Redis and can be lost (a flush, a
restart without persistence, a queryset ``update`` that sends none), while REST already
answers 401.
"""

from __future__ import annotations

import time
from datetime import datetime
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import (
    api_token_authenticate,
    api_token_socket_group,
    session_socket_group,
)

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


def sign_in_socket_groups(scope: dict[str, Any]) -> list[str]:
    """The channel-layer group a socket joins for what it signed in with: its API token
    (revoking it closes the socket) or its browser session (signing out of it does)."""
    token_id = scope.get(SCOPE_TOKEN_ID)
    if token_id is not None:
        return [api_token_socket_group(token_id)]
    session = scope.get("session")
    session_key = getattr(session, "session_key", None) if session is not None else None
    return [session_socket_group(session_key)] if session_key else []


def token_seconds_left(scope: dict[str, Any]) -> float | None:
    """Seconds until the socket's API token expires (0.0 if it already has), else None.

    None for a session socket and for a token without expiry. The chat consumer closes a
    token socket with 4401 when this runs out, as REST answers 401 from then on.
    """
    expires_at: datetime | None = scope.get(SCOPE_TOKEN_EXPIRES_AT)
    if expires_at is None:
        return None
    return max(0.0, (expires_at - timezone.now()).total_seconds())


def sign_in_recheck_s() -> float:
    """Seconds a socket's last successful sign-in check is trusted
    (``WS_SIGN_IN_RECHECK_S``, default 5)."""
    return float(settings.WS_SIGN_IN_RECHECK_S)


def _token_usable(token_id: int, user_id: int) -> bool:
    return (
        ApiToken.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
            pk=token_id,
            user_id=user_id,
            revoked_at__isnull=True,
            user__is_active=True,
        )
        .only("pk")
        .exists()
    )


def _session_user_id(session_key: str) -> int | None:
    # A fresh store: the scope's session object keeps what it read at the handshake.
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    # Django's own check: the session exists, names an active user of a configured
    # backend, and its hash matches the user's current password.
    user = get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    return int(user.pk) if user.is_authenticated else None


def sign_in_valid(scope: dict[str, Any]) -> bool:
    """Whether the socket's sign-in still holds, as REST would judge it now (sync, 1-2 queries).

    A token socket: its ``ApiToken`` is neither revoked nor expired and its user is active.
    A session socket: its session still exists and Django's ``get_user`` still finds the
    socket's user in it (active, same password hash). False for anything else.
    """
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return False
    token_id = scope.get(SCOPE_TOKEN_ID)
    if token_id is not None:
        return _token_usable(int(token_id), int(user.pk))
    session_key = getattr(scope.get("session"), "session_key", None)
    return bool(session_key) and _session_user_id(str(session_key)) == user.pk


class SignInCheck:
    """A socket's cached sign-in check: at most one look-up per :func:`sign_in_recheck_s`.

    The handshake counts as the first check. Once the sign-in is found invalid it stays
    invalid (the socket is closing).
    """

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope
        self._valid = True
        self._checked_at = time.monotonic()

    async def valid(self) -> bool:
        """True while the sign-in holds; looks it up again once the cached answer is stale."""
        if self._valid and time.monotonic() - self._checked_at >= sign_in_recheck_s():
            self._valid = await database_sync_to_async(sign_in_valid)(self.scope)
            self._checked_at = time.monotonic()
        return self._valid
