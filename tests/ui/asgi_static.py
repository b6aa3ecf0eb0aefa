"""The ASGI application the browser tests serve: OpenMates plus ``/static/`` files.

Daphne serving ``openmates.asgi:application`` does not serve static files; the tests
serve them through Django's own ASGI static files handler (finders, no collectstatic).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from openmates.asgi import application as openmates_application
from openmates.asgi import django_asgi_app

_static = ASGIStaticFilesHandler(django_asgi_app)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Static files for ``STATIC_URL`` paths, everything else through OpenMates."""
    if scope["type"] == "http" and scope["path"].startswith("/" + settings.STATIC_URL.lstrip("/")):
        await _static(scope, receive, send)
    else:
        await openmates_application(scope, receive, send)
