"""Helpers for the turn runtime's unit tests (test_registry, test_delivery, test_reaper).

Real Redis and a real channel layer throughout; what stands in for a socket is
:class:`Recorder`, a :class:`pipeline.runtime.Subscriber` that keeps what it was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from channels.layers import channel_layers, get_channel_layer

from pipeline import state
from pipeline.ids import new_id

WAIT_S = 5.0


class Recorder:
    """A local socket: every frame it is sent, and when (``time.monotonic()``)."""

    def __init__(self, channel_name: str = "") -> None:
        self.channel_name = channel_name or f"specific.test!{new_id()}"
        self.frames: list[dict[str, Any]] = []
        self.times: list[float] = []

    async def deliver(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        self.times.append(time.monotonic())

    def types(self) -> list[str]:
        return [frame["type"] for frame in self.frames]

    async def until(self, kind: str, wait_s: float = WAIT_S) -> dict[str, Any]:
        """The first frame of type ``kind`` (waiting up to ``wait_s`` for it)."""
        await eventually(lambda: kind in self.types(), wait_s)
        return next(frame for frame in self.frames if frame["type"] == kind)


class Spawner:
    """A ``Delivery``'s ``spawn``: runs coroutines as tasks and can wait for them all."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self.tasks.add(asyncio.create_task(coroutine))

    async def settle(self) -> None:
        while pending := [task for task in self.tasks if not task.done()]:
            await asyncio.gather(*pending)


async def eventually(condition: Callable[[], bool], wait_s: float = WAIT_S) -> None:
    """Return once ``condition()`` holds; fail after ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {wait_s} s"
        await asyncio.sleep(0.005)


def task_record(
    *, user_id: int | str = "7", chat_id: str = "", owner: str = "specific.test!owner"
) -> state.TaskRecord:
    """A fresh task record (state ``queued``, as a turn's start writes it)."""
    return state.TaskRecord(
        task_id=new_id(),
        user_id=str(user_id),
        chat_id=chat_id or new_id(),
        message_id=new_id(),
        assistant_message_id=new_id(),
        owner=owner,
        state="queued",
    )


@asynccontextmanager
async def fresh_channel_layer() -> AsyncIterator[Any]:
    """The project's channel layer, new for this test's event loop and closed after it
    (channels-redis keeps per-loop receive state)."""
    channel_layers.backends.clear()
    layer = get_channel_layer()
    try:
        yield layer
    finally:
        backend = channel_layers.backends.pop("default", None)
        if backend is not None:
            await backend.close_pools()


async def received(layer: Any, channel: str, wait_s: float = WAIT_S) -> dict[str, Any]:
    """The next channel-layer message of ``channel``."""
    message: dict[str, Any] = await asyncio.wait_for(layer.receive(channel), wait_s)
    return message


async def forget_turn(record: state.TaskRecord) -> None:
    """Remove what a test left of a task in Redis (lease, queue place, record, keys)."""
    await state.lease_release(chat_id=record.chat_id, task_id=record.task_id)
    await state.record_delete(record)
    await state.snapshot_drop(record.task_id)
