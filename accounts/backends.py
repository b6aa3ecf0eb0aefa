"""The sign-in throttling backend (django-axes)."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest

# The width of django-axes' ``username`` columns (AccessAttempt, AccessLog, ...).
AXES_USERNAME_MAX_LENGTH = 255


class ThrottledBackend(AxesStandaloneBackend):
    """django-axes' backend, skipped for ``authenticate()`` calls without a request.

    Every sign-in over HTTP (the sign-in page, the admin, the password check) carries a
    request and is throttled. Calls without one (``Client.login`` in tests, a shell) cannot
    be attributed to a client; axes would raise for them, so they fall through to the
    next backend unthrottled.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def axes_username(request: HttpRequest | None, credentials: dict[str, Any] | None) -> str | None:
    """The username django-axes records: the submitted one, cut to axes' column width.

    ``AXES_USERNAME_CALLABLE``. Without it a sign-in form posted with a username longer
    than 255 characters (the admin's, or any ``authenticate()`` caller's) made axes'
    insert fail with a database error, a 500. Real usernames are at most 150 characters,
    so the cut never merges two real accounts' counters.

    Args:
        request: the sign-in request (None for calls without one).
        credentials: the ``authenticate()`` keyword arguments, when axes has them.

    Returns:
        The username (at most 255 characters), or None when none was submitted.
    """
    field = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")
    if credentials:
        raw = credentials.get(field)
    elif request is not None:
        raw = getattr(request, "data", request.POST).get(field)
    else:
        raw = None
    if raw is None:
        return None
    return str(raw)[:AXES_USERNAME_MAX_LENGTH]
