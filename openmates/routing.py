"""WebSocket URL patterns, collected from the apps that serve sockets."""

from __future__ import annotations

from typing import Any

# The pipeline app adds ``/ws/chat/`` here (PROTOCOL.md).
websocket_urlpatterns: list[Any] = []
