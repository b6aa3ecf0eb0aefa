"""The bare-Channels floor of ``bench/turn_overhead.py``: the same frames, no pipeline.

A minimal ASGI application (Channels' ``AsyncWebsocketConsumer`` under Daphne, started
with the same flags as the real server) that answers ``message.send`` the way a turn on
the bench's instant model does, with nothing in between: ``task.active`` on connect,
then per ``message.send`` ``tokens`` ``stream.delta`` frames (one token each, pausing
``gap_ms`` after each, both read from the message's ``tokens=N gap_ms=G`` words as the
instant model reads them) and ``stream.done``. What the real server measures beyond this
floor is the turn runtime's own cost.

Run: ``daphne -b 127.0.0.1 -p PORT bench.floor_asgi:application``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import django
from django.conf import settings

if not settings.configured:
    # No database, cache or channel layer: the floor's consumer needs none of them.
    settings.configure(DEBUG=False, USE_TZ=True, INSTALLED_APPS=["channels"])
    django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer
from channels.routing import ProtocolTypeRouter, URLRouter
from django.urls import path


def _words(content: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in content.split() if "=" in part)


class FloorConsumer(AsyncWebsocketConsumer):
    """Answers ``message.send`` with paced ``stream.delta`` frames and a ``stream.done``."""

    async def connect(self) -> None:
        await self.accept()
        self.streams: set[asyncio.Task[None]] = set()
        await self._send({"type": "task.active", "tasks": []})

    async def disconnect(self, code: int) -> None:
        for task in self.streams:
            task.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = json.loads(text_data or "{}")
        if frame.get("type") != "message.send":
            return
        # Frames keep arriving while a turn streams, as on the real server.
        task = asyncio.create_task(self._answer(frame))
        self.streams.add(task)
        task.add_done_callback(self.streams.discard)

    async def _answer(self, frame: dict[str, Any]) -> None:
        words = _words(str(frame.get("content", "")))
        tokens, gap = int(words.get("tokens", 3)), float(words.get("gap_ms", 0)) / 1000
        ids = {"chat_id": frame["chat_id"], "task_id": frame["message_id"]}
        text = []
        for n in range(tokens):
            text.append(f"t{n} ")
            await self._send(
                {
                    "type": "stream.delta",
                    **ids,
                    "message_id": frame["message_id"],
                    "sequence": n + 1,
                    "delta": text[-1],
                }
            )
            if gap:
                await asyncio.sleep(gap)
        await self._send(
            {
                "type": "stream.done",
                **ids,
                "message_id": frame["message_id"],
                "content": "".join(text),
                "model": "floor",
                "usage": {"prompt_tokens": 10, "completion_tokens": tokens},
                "status": "done",
            }
        )

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame, ensure_ascii=False))


application = ProtocolTypeRouter(
    {"websocket": URLRouter([path("ws/chat/", FloorConsumer.as_asgi())])}
)
