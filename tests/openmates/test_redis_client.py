"""openmates.redis_client against the session's real Redis: one client per event loop,
shared by the chat caches and the turn state; exhausted pools wait instead of failing."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import redis.asyncio

from chats import cache
from openmates import redis_client
from pipeline import state


def _key() -> str:
    return f"test:redis-client:{uuid.uuid4()}"


def _client_in_new_loop() -> object:
    async def get() -> object:
        return redis_client.async_client()

    return asyncio.run(get())


async def test_one_async_client_per_event_loop_shared_by_cache_and_turn_state() -> None:
    client = redis_client.async_client()
    assert redis_client.async_client() is client
    assert cache.aredis_client() is client
    assert state.redis_client() is client
    assert await client.ping()
    # Another loop (another thread here) gets its own: a pool belongs to one loop.
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(_client_in_new_loop()))
    thread.start()
    thread.join()
    assert len(other) == 1
    assert other[0] is not client


def test_one_sync_client_per_process_shared_by_threads() -> None:
    client = redis_client.sync_client()
    assert cache.redis_client() is client
    with ThreadPoolExecutor(max_workers=8) as pool:
        seen = set(pool.map(lambda _: id(redis_client.sync_client()), range(32)))
    assert seen == {id(client)}


async def test_exhausted_async_pool_waits_for_a_connection_instead_of_failing(settings) -> None:
    settings.REDIS_POOL_MAX_CONNECTIONS = 3
    client = redis_client.async_client()
    pool = client.connection_pool
    assert pool.max_connections == 3
    # Each BLPOP holds its connection 0.1 s: 30 at once need ten rounds of the 3.
    started = time.monotonic()
    results = await asyncio.gather(*(client.blpop([_key()], timeout=0.1) for _ in range(30)))
    assert results == [None] * 30
    assert time.monotonic() - started >= 0.9
    # The AI cache and the turn state go through the same 3 connections and wait too.
    writes = [state.cancel_flag_set(f"t-{n}-{uuid.uuid4()}") for n in range(20)]
    reads = [cache.ai_cached_chat_ids(user_id=f"nobody-{n}") for n in range(20)]
    outcome = await asyncio.gather(*writes, *reads)
    assert outcome == [None] * 20 + [[]] * 20
    assert len(pool._in_use_connections) + len(pool._available_connections) <= 3


def test_exhausted_sync_pool_waits_for_a_connection_instead_of_failing(settings) -> None:
    settings.REDIS_POOL_MAX_CONNECTIONS = 2
    client = redis_client.sync_client()
    assert client.connection_pool.max_connections == 2
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda _: client.blpop([_key()], timeout=0.1), range(12)))
    assert results == [None] * 12


async def test_the_wait_for_a_connection_is_bounded_by_the_pool_timeout(settings) -> None:
    settings.REDIS_POOL_MAX_CONNECTIONS = 1
    settings.REDIS_POOL_TIMEOUT_S = 0.1
    client = redis_client.async_client()

    async def hold() -> object:
        return await client.blpop([_key()], timeout=1)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0.05)
    with pytest.raises(redis.ConnectionError, match="No connection available"):
        await client.get(_key())
    assert await holder is None


async def test_changed_redis_settings_build_new_clients(settings) -> None:
    before_async, before_sync = redis_client.async_client(), redis_client.sync_client()
    settings.REDIS_POOL_MAX_CONNECTIONS = 7
    assert redis_client.async_client() is not before_async
    assert redis_client.async_client().connection_pool.max_connections == 7
    assert redis_client.sync_client() is not before_sync
    assert redis_client.sync_client().connection_pool.max_connections == 7


async def test_the_channel_layer_waits_for_a_pooled_connection_instead_of_failing(
    settings,
) -> None:
    settings.REDIS_POOL_MAX_CONNECTIONS = 2
    layer = redis_client.ChannelLayer(
        hosts=[{"address": settings.REDIS_URL, "socket_timeout": 30}],
        prefix=f"test:{uuid.uuid4().hex[:8]}",
    )
    try:
        pool = layer.connection(0).connection_pool
        assert isinstance(pool, redis.asyncio.BlockingConnectionPool)
        assert pool.max_connections == 2
        channels = [await layer.new_channel() for _ in range(40)]
        # 40 group joins and 40 group sends at once through 2 connections: all go through.
        await asyncio.gather(*(layer.group_add("everyone", c) for c in channels))
        await asyncio.gather(
            *(layer.group_send("everyone", {"type": "hello", "n": n}) for n in range(40))
        )
        first = await asyncio.wait_for(layer.receive(channels[0]), 10)
        assert first["type"] == "hello"
    finally:
        await layer.flush()
