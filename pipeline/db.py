"""Database and cache calls of running turns.

Turns' own ORM calls go through :func:`openmates.db.db_call` (re-exported here): the
shared, bounded executor, with the connection released after each call, so 200 streaming
turns do not exhaust PostgreSQL's connections.
"""

from __future__ import annotations

import asyncio
import weakref

from openmates.db import db_call

__all__ = ["CACHE_SLOTS", "cache_slot", "db_call"]

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
