"""The process's Redis clients on ``settings.REDIS_URL``: one async client per event loop
and one sync client (the chat caches and the turn state share them).

Both pools are redis-py ``BlockingConnectionPool``s of ``REDIS_POOL_MAX_CONNECTIONS``
connections: a command that finds every connection busy waits for one (up to
``REDIS_POOL_TIMEOUT_S``, then ``redis.ConnectionError``) instead of failing at once as
redis-py's default pool does. Under load a turn therefore waits a moment rather than
ending with ``cache_unavailable``. An async pool belongs to the event loop it was created
on (tests and threads run several loops), hence one client per loop; a loop's client goes
with the loop. Changing a ``REDIS_*`` setting (``override_settings`` in tests) drops the
clients so the next call builds them from the new values.

The channel layer (``settings.CHANNEL_LAYERS``) is :class:`ChannelLayer`: channels-redis
on pools of the same kind and size (its own default pool failed with "Too many
connections" past 100 busy connections: 500 concurrent turns announcing themselves
closed sockets with 1011). The Django cache (``django-redis``) keeps its own pool.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aredis
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

_sync_client: redis.Redis | None = None
_sync_lock = threading.Lock()
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aredis.Redis] = (
    weakref.WeakKeyDictionary()
)


def _pool_options() -> dict[str, Any]:
    return {
        "max_connections": int(settings.REDIS_POOL_MAX_CONNECTIONS),
        "timeout": float(settings.REDIS_POOL_TIMEOUT_S),
        "socket_timeout": float(settings.REDIS_SOCKET_TIMEOUT_S),
        "socket_connect_timeout": float(settings.REDIS_SOCKET_TIMEOUT_S),
    }


def sync_client() -> redis.Redis:
    """The process's synchronous client (thread-safe; management commands, sync code)."""
    global _sync_client
    client = _sync_client
    if client is None:
        with _sync_lock:
            if _sync_client is None:
                pool = redis.BlockingConnectionPool.from_url(settings.REDIS_URL, **_pool_options())
                _sync_client = redis.Redis(connection_pool=pool)
            client = _sync_client
    return client


def async_client() -> aredis.Redis:
    """The running event loop's asynchronous client.

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        pool = aredis.BlockingConnectionPool.from_url(settings.REDIS_URL, **_pool_options())
        client = aredis.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


class ChannelLayer(RedisChannelLayer):
    """channels-redis's ``RedisChannelLayer`` whose per-loop pools are blocking pools of
    ``REDIS_POOL_MAX_CONNECTIONS`` connections: a ``group_send`` or ``group_add`` that
    finds them all busy waits (up to ``REDIS_POOL_TIMEOUT_S``) instead of raising
    ``MaxConnectionsError``. A host entry's own options (``socket_timeout``, …) win."""

    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # Sentinel hosts: channels-redis's own pool
            return super().create_pool(index)
        address = host.pop("address")
        return aredis.BlockingConnectionPool.from_url(address, **{**_pool_options(), **host})


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    # Clients built from the old values would keep them: build new ones on next use.
    global _sync_client
    if (
        setting == "REDIS_URL"
        or setting.startswith("REDIS_POOL_")
        or setting.startswith("REDIS_SOCKET_")
    ):
        with _sync_lock:
            _sync_client = None
        _async_clients.clear()
