"""The ASGI application ``runlocal`` serves: OpenMates plus its ``/static/`` files.

``openmates.asgi:application`` leaves static files to the proxy in front of it (or a
``collectstatic`` directory it serves). The embedded default has no proxy, so, like
``runserver``, it serves them through Django's static files handler (finders, no
``collectstatic`` step). WebSockets and every other path go to OpenMates unchanged.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from openmates.asgi import application as openmates_application
from openmates.asgi import django_asgi_app

_static = ASGIStaticFilesHandler(django_asgi_app)
_STATIC_PREFIX = "/" + settings.STATIC_URL.lstrip("/")


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Static files for ``STATIC_URL`` paths, everything else through OpenMates."""
    if scope["type"] == "http" and scope["path"].startswith(_STATIC_PREFIX):
        await _static(scope, receive, send)
    else:
        await openmates_application(scope, receive, send)
