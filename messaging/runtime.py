"""Where this process's channel manager runs, and how webhook views reach it.

docs/channels.md §2. A serving process (``openmates.apps.serving``) runs its manager on
an event loop of its own in a daemon thread, started from ``MessagingConfig.ready``:
Daphne has no lifespan hook, and the adapters' polling and turns then never compete
with the web server's loop. Webhook views hand updates to that loop (``call``). Tests
install a manager on their own loop instead (``install``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from django.apps import apps

from messaging.manager import ChannelManager

T = TypeVar("T")
APPS_READY_POLL_S = 0.05

_lock = threading.Lock()
_manager: ChannelManager | None = None
_loop: asyncio.AbstractEventLoop | None = None


def install(manager: ChannelManager | None, loop: asyncio.AbstractEventLoop | None) -> None:
    """Make ``manager`` (running on ``loop``) the process's; ``None`` removes it."""
    global _manager, _loop
    with _lock:
        _manager, _loop = manager, loop


def current() -> ChannelManager | None:
    """The process's channel manager, or None (not a serving process, or turned off)."""
    return _manager


async def call(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the manager's loop and wait for it from the caller's loop.

    Raises: what the coroutine raises; ``RuntimeError`` when no manager is installed.
    """
    loop = _loop
    if loop is None:
        coroutine.close()
        raise RuntimeError("no channel manager runs in this process")
    if loop is asyncio.get_running_loop():
        return await coroutine
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


def start_in_thread() -> threading.Thread:
    """Start a manager on a new loop in a daemon thread (once per process)."""
    ready = threading.Event()

    def _run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        manager = ChannelManager()
        install(manager, loop)
        ready.set()
        # Started from an AppConfig.ready(): the first reconcile reads ChannelConfig rows
        # only once every app is ready (Django warns of queries during app initialisation).
        while not apps.ready:
            time.sleep(APPS_READY_POLL_S)
        loop.run_until_complete(manager.run(asyncio.Event()))

    thread = threading.Thread(target=_run, name="channel-manager", daemon=True)
    thread.start()
    ready.wait(timeout=5)
    return thread
