"""Sync ORM code called from async code that runs many at once (turns).

A turn runs in its own ``ThreadSensitiveContext`` (docs/architecture.md §5); a thread-sensitive ORM
call inside it would take a database connection on the turn's own thread and hold it
until the turn ends, so 200 concurrent turns would want 200 connections. :func:`db_call`
runs the call on asgiref's shared, bounded executor instead and hands the connection
back afterwards (to psycopg's pool, see ``settings.DATABASES``): the process holds a
handful of connections however many turns run. No transaction spans two calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

T = TypeVar("T")


async def db_call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``function(*args, **kwargs)`` (sync ORM code) off the event loop.

    Returns what ``function`` returns and raises what it raises; the thread's database
    connection is released afterwards either way.
    """
    return await sync_to_async(_call_and_release, thread_sensitive=False)(function, args, kwargs)


def _call_and_release(function: Callable[..., T], args: Any, kwargs: Any) -> T:
    try:
        return function(*args, **kwargs)
    finally:
        close_old_connections()
