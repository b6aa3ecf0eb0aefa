"""WebSocket URL patterns, collected from the apps that serve sockets.

The last pattern catches every other path and refuses its handshake (``NotFoundConsumer``),
so an unknown path is a clean refusal rather than a routing error.
"""

from __future__ import annotations

from typing import Any

from django.urls import path, re_path

from pipeline.consumers import ChatConsumer, NotFoundConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/chat/", ChatConsumer.as_asgi()),
    re_path(r"", NotFoundConsumer.as_asgi()),
]
