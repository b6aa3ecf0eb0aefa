"""REST authentication: the session (browsers), with its own error code for a failed CSRF
check, and the API token: ``Authorization: Bearer om_<prefix>_<secret>``.

Listed after ``SessionAuthentication`` in ``REST_FRAMEWORK``: a request without a Bearer
header is left to the session (browsers). A Bearer header whose token is malformed,
unknown, revoked or expired, or whose user is inactive, answers 401
``{"code": "invalid_token", "message": ...}`` with ``WWW-Authenticate: Bearer
error="invalid_token"`` (RFC 6750), never a fall-back to another scheme.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.request import Request

from accounts.models import ApiToken
from accounts.services import api_token_authenticate

BEARER_REALM = 'Bearer realm="api"'


class CsrfFailedError(PermissionDenied):
    """403 for a session request whose CSRF token is missing or wrong (stable code
    ``csrf_failed``; DRF's is the generic ``permission_denied``)."""

    default_code = "csrf_failed"


class CsrfCheckedSessionAuthentication(SessionAuthentication):
    """DRF's session authentication, its CSRF refusal answered with ``csrf_failed``."""

    def enforce_csrf(self, request: Request) -> None:
        """DRF's check (Django's ``CsrfViewMiddleware`` logic).

        Raises:
            CsrfFailedError: the reason in its message ("CSRF Failed: …").
        """
        try:
            super().enforce_csrf(request)
        except PermissionDenied as refused:
            raise CsrfFailedError(str(refused.detail)) from None


class InvalidApiTokenError(APIException):
    """401 for a Bearer token that does not authenticate (stable code ``invalid_token``).

    Not an ``AuthenticationFailed``: DRF turns those into 403 when the first listed
    authenticator (the session) has no ``WWW-Authenticate`` challenge.
    """

    status_code = 401
    default_code = "invalid_token"
    auth_header = 'Bearer realm="api", error="invalid_token"'

    def __init__(self) -> None:
        super().__init__(
            {
                "code": "invalid_token",
                "message": "The API token is malformed, unknown, revoked or expired.",
            }
        )


class ApiTokenAuthentication(BaseAuthentication):
    """DRF authentication by a user's API token; ``request.auth`` is the ``ApiToken``."""

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        """The token's user and token, None without a Bearer header.

        Raises:
            InvalidApiTokenError: a Bearer header whose token does not authenticate.
        """
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise InvalidApiTokenError
        token = api_token_authenticate(parts[1].decode("latin-1"))
        if token is None:
            raise InvalidApiTokenError
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        """The challenge sent with 401 answers."""
        return BEARER_REALM
