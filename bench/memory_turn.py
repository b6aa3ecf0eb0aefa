"""What memories add to one turn (docs/architecture.md §10 and §12).

Starts an embedded PostgreSQL (pgvector), Redis and a dev OpenBao in a temporary
directory (as ``bench/memory_search.py`` does), migrates, and gives one user of an
instance on the packaged local embedder ``--memories`` memories (default 200, half of
them ``preference``) through ``memories.services``. Then times, in one event loop, the
two steps a turn runs before its main call:

    consent_none_p50: … ms        pipeline.turn._memory_consent for a message that wants
                                  no memory category (no Redis, no database)
    consent_p50: … ms             the same for a message that wants ``preference``, which
                                  the chat allowed (Redis, then the user's categories)
    retrieval_p50: … ms           pipeline.prompts.memories_retrieve for ``preference``:
                                  the settings read, the local embedding, one hybrid
                                  search, the winners decrypted (and its p95)
    local_embed_p50: … ms         memories.vectors.aembed of the query alone (the floor of
                                  the retrieval: the embedding model's own time)
    db_call_p50: … ms             openmates.db.db_call of ``SELECT 1`` and
    redis_p50: … ms               one Redis HGETALL: the floors of the consent step

Usage: ``.venv/bin/python bench/memory_turn.py [--memories 200] [--samples 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_search import _percentile, embedded_services

TOPICS = ["tea", "hiking", "jazz", "sushi", "chess", "gardening", "cycling", "poetry"]


async def _timed(call: Callable[[], Awaitable[Any]], samples: int) -> list[float]:
    for _ in range(10):  # warm: the embedder loaded, data keys and connections ready
        await call()
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _setup(count: int) -> tuple[Any, Any]:
    from asgiref.sync import async_to_sync
    from django.contrib.auth import get_user_model

    from instances.models import Instance
    from memories import services

    instance = Instance.objects.create(slug="bench-memories", name="Bench")
    user = get_user_model().objects.create_user(username="bench-user", password=None)
    for n in range(count):
        category = "preference" if n % 2 == 0 else "fact"
        topic = TOPICS[n % len(TOPICS)]
        async_to_sync(services.amemory_create)(
            instance=instance,
            user_id=user.pk,
            category=category,
            content=f"The user's note {n}: they like {topic} on day {n % 7} of the week",
        )
    return instance, user


async def _measure(instance: Any, user: Any, samples: int) -> None:
    from chats.models import Chat
    from memories import vectors
    from openmates.db import db_call
    from pipeline import prompts, state, turn
    from pipeline.ids import new_id

    chat_id = new_id()
    await state.memory_consent_mark(chat_id, {"preference": "allowed"})
    # An unsaved chat of the default (client-encrypted) mode: the consent asks its client.
    request: Any = SimpleNamespace(
        instance=instance, user_id=user.pk, chat=Chat(pk=chat_id, instance=instance)
    )
    query = "Can you recommend something to drink with my tea tonight?"
    none = await _timed(lambda: turn._memory_consent(request, ()), samples)
    consent = await _timed(lambda: turn._memory_consent(request, ("preference",)), samples)
    retrieval = await _timed(
        lambda: prompts.memories_retrieve(
            user_id=user.pk, instance=instance, query=query, categories=["preference"]
        ),
        samples,
    )
    embed = await _timed(lambda: vectors.aembed(instance, [query]), samples)
    database = await _timed(lambda: db_call(_select_one), samples)
    redis = await _timed(lambda: state.memory_consent_get(chat_id), samples)
    found = await prompts.memories_retrieve(
        user_id=user.pk, instance=instance, query=query, categories=["preference"]
    )
    print(f"memories_in_prompt: {len(found)}")
    print(f"consent_none_p50: {statistics.median(none):.3f} ms")
    print(f"consent_p50: {statistics.median(consent):.2f} ms")
    print(f"retrieval_p50: {statistics.median(retrieval):.2f} ms")
    print(f"retrieval_p95: {_percentile(retrieval, 0.95):.2f} ms")
    print(f"local_embed_p50: {statistics.median(embed):.2f} ms")
    print(f"db_call_p50: {statistics.median(database):.2f} ms")
    print(f"redis_p50: {statistics.median(redis):.2f} ms")


def _select_one() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    with embedded_services("openmates-bench-memory-turn-"):
        from memories import search
        from pipeline import prompts

        prompts.memory_retriever_set(search.amemories_for_prompt)
        instance, user = _setup(args.memories)
        asyncio.run(_measure(instance, user, args.samples))


if __name__ == "__main__":
    main()
