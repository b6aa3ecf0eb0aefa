"""DRF permissions about *how* a request authenticated, not just whether it did.

An API token (``accounts.authentication.ApiTokenAuthentication``) is a credential a script
keeps in a file or an environment variable; if it leaks, it must not be able to do what
cannot be undone. Replacing the wrapped master keys (every encrypted chat would become
unreadable) and deleting the account therefore need a browser session.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import APIException
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from accounts.authentication import ApiTokenAuthentication


class SessionRequiredError(APIException):
    """403 for an API-token request to a browser-session-only endpoint (``session_required``)."""

    status_code = 403
    default_code = "session_required"

    def __init__(self) -> None:
        super().__init__(
            {
                "code": "session_required",
                "message": "This needs a signed-in browser session; API tokens cannot do it.",
            }
        )


def authenticated_by_token(request: Request) -> bool:
    """Whether DRF authenticated ``request`` with an API token (not the session)."""
    return isinstance(request.successful_authenticator, ApiTokenAuthentication)


class SessionOnly(BasePermission):
    """Refuses requests authenticated by an API token, whatever the method.

    Raises:
        SessionRequiredError: the request came with a valid API token (403).
    """

    # Methods an API token may still use on the view (none here).
    token_methods: frozenset[str] = frozenset()

    def has_permission(self, request: Request, view: Any) -> bool:
        """True unless a token authenticated a method outside :attr:`token_methods`."""
        if request.method not in self.token_methods and authenticated_by_token(request):
            # Raised rather than returned: DRF's own refusal carries no stable code.
            raise SessionRequiredError()
        return True


class SessionOnlyForWrites(SessionOnly):
    """Like :class:`SessionOnly`, but API tokens may still read (GET, HEAD, OPTIONS)."""

    token_methods = frozenset(SAFE_METHODS)
