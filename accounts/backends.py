"""The sign-in throttling backend (django-axes)."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest


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
