"""Database calls of running turns.

A turn runs in its own ``ThreadSensitiveContext`` (DESIGN.md §5), which would give every
concurrent turn its own thread and so its own PostgreSQL connection: 200 streaming turns
exhausted the server's connection limit in ``bench/turn_overhead.py``. The turn's own
writes therefore run on asgiref's shared, bounded executor (``thread_sensitive=False``):
they still never queue behind the sockets' thread, and the process holds a handful of
connections however many turns run. No transaction spans two calls.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

T = TypeVar("T")


async def db_call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``function(*args, **kwargs)`` (sync ORM code) off the event loop."""
    return await sync_to_async(function, thread_sensitive=False)(*args, **kwargs)


# chats.cache's Redis client uses redis-py's default pool (100 connections, failing with
# MaxConnectionsError beyond): 200 concurrent turns exceeded it in bench/turn_overhead.py.
# Turns therefore hold one of CACHE_SLOTS while they call the AI cache.
CACHE_SLOTS = 48
_cache_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def cache_slot() -> asyncio.Semaphore:
    """The running event loop's limit on concurrent AI-cache calls (``async with``)."""
    loop = asyncio.get_running_loop()
    slots = _cache_slots.get(loop)
    if slots is None:
        slots = _cache_slots[loop] = asyncio.Semaphore(CACHE_SLOTS)
    return slots
