"""WebSocket URL patterns, collected from the apps that serve sockets."""

from __future__ import annotations

from typing import Any

from django.urls import path

from pipeline.consumers import ChatConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/chat/", ChatConsumer.as_asgi()),
]
