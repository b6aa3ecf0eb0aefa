"""The AI cache on the hot path (docs/architecture.md §10: ``vault_round_trips_per_turn`` ≤ 1).

Starts an embedded Redis and a dev OpenBao in a temporary directory (nothing else), caches
a 50-message chat and measures loading it back (a hit: 50 envelopes opened locally), then
runs warm follow-up turns as the pipeline does them (load the history, append the user
message, append the reply, seal the reply's server-side copy) and counts the HTTP requests
``openmates.vault`` sent meanwhile.

Prints:

    cache_load_p50: … ms            ai_history_load of a 50-message chat (hit)
    cache_load_p99: … ms
    cache_append_p50: … ms          ai_history_append of one message (LRU touch included)
    vault_round_trips_per_turn: …   Vault requests per warm follow-up turn (100 turns)

Usage: ``.venv/bin/python bench/cache.py [--loads 500] [--turns 100]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

USER_ID = 4242
MESSAGE_TEXT = "A follow-up question about the previous answer, of ordinary length. " * 6


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_services(root: Path) -> list[Any]:
    from openmates.runlocal.openbao import EmbeddedOpenBao
    from openmates.runlocal.redis import EmbeddedRedis

    redis_server = EmbeddedRedis(root / "redis", persistent=False)
    os.environ["REDIS_URL"] = redis_server.start()
    bao = EmbeddedOpenBao(root / "openbao", mode="dev")
    bao.start()
    os.environ.update(bao.configure())
    os.environ["OPENMATES_DATA_DIR"] = str(root / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
    import django

    django.setup()
    return [bao, redis_server]


def _message(role: str) -> dict[str, str]:
    return {"message_id": str(uuid.uuid4()), "role": role, "content": MESSAGE_TEXT}


async def _measure(loads: int, turns: int) -> dict[str, float]:
    from chats import cache
    from openmates import vault

    key_name = vault.user_key_name(USER_ID)
    vault.ensure_key(key_name)
    load_ms = await _measure_loads(loads)
    append_ms, round_trips = await _measure_turns(key_name, turns)
    cache.prune(user_id=USER_ID)
    return {
        "cache_load_p50": statistics.median(load_ms),
        "cache_load_p99": _percentile(load_ms, 0.99),
        "cache_append_p50": statistics.median(append_ms),
        "vault_round_trips_per_turn": round_trips,
    }


async def _measure_loads(loads: int) -> list[float]:
    """Milliseconds of each of ``loads`` cache hits on a cached 50-message chat."""
    from chats import cache

    chat_id = str(uuid.uuid4())
    history = [_message("user" if i % 2 == 0 else "assistant") for i in range(50)]
    await cache.ai_history_store(user_id=USER_ID, chat_id=chat_id, messages=history)
    load_ms: list[float] = []
    for _ in range(loads):
        started = time.perf_counter()
        result = await cache.ai_history_load(
            user_id=USER_ID, chat_id=chat_id, expected_done_count=50
        )
        load_ms.append((time.perf_counter() - started) * 1000.0)
        if result.messages is None or len(result.messages) != 50:
            raise SystemExit(f"expected a 50-message hit, got {result}")
    return load_ms


async def _measure_turns(key_name: str, turns: int) -> tuple[list[float], float]:
    """Milliseconds of each message append over ``turns`` warm follow-up turns, and the
    Vault requests per turn."""
    from chats import cache
    from openmates import vault

    # Warm follow-up turns on another chat: start from a warm data key, as a server does.
    turn_chat = str(uuid.uuid4())
    await cache.ai_history_append(user_id=USER_ID, chat_id=turn_chat, message=_message("user"))
    await _seal_reply(key_name, "warm-up", b"warm")
    append_ms: list[float] = []
    done = 1
    before = vault.call_count()
    for _ in range(turns):
        loaded = await cache.ai_history_load(
            user_id=USER_ID, chat_id=turn_chat, expected_done_count=done
        )
        if loaded.messages is None:
            raise SystemExit(f"a warm turn missed the cache: {loaded.reason}")
        for role in ("user", "assistant"):
            started = time.perf_counter()
            await cache.ai_history_append(
                user_id=USER_ID, chat_id=turn_chat, message=_message(role)
            )
            append_ms.append((time.perf_counter() - started) * 1000.0)
        reply = _message("assistant")
        await _seal_reply(key_name, reply["message_id"], reply["content"].encode())
        done += 2
    return append_ms, (vault.call_count() - before) / turns


async def _seal_reply(key_name: str, object_id: str, plaintext: bytes) -> None:
    """Seal a reply's server-side copy, as a turn does."""
    from openmates import crypto

    await crypto.aseal(
        key_name=key_name,
        purpose="server-managed",
        owner_id=USER_ID,
        object_id=object_id,
        plaintext=plaintext,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--loads", type=int, default=500)
    parser.add_argument("--turns", type=int, default=100)
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="openmates-bench-cache-"))
    services: list[Any] = []
    try:
        services = _start_services(root)
        figures = asyncio.run(_measure(options.loads, options.turns))
    finally:
        for service in services:
            service.destroy()
        shutil.rmtree(root, ignore_errors=True)
    print(f"cache_load_p50: {figures['cache_load_p50']:.2f} ms")
    print(f"cache_load_p99: {figures['cache_load_p99']:.2f} ms")
    print(f"cache_append_p50: {figures['cache_append_p50']:.2f} ms")
    print(f"vault_round_trips_per_turn: {figures['vault_round_trips_per_turn']:.2f}")


if __name__ == "__main__":
    main()
