"""chats.cache against real Redis and OpenBao: LRU, TTLs, keys, fallback reasons."""

from __future__ import annotations

import asyncio
import io
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from chats import cache
from openmates import crypto, vault
from tests.redis_round_trips import round_trips


def _id() -> str:
    return str(uuid.uuid4())


def _message(text: str, role: str = "user") -> dict[str, str]:
    return {"message_id": _id(), "role": role, "content": text}


async def test_lru_keeps_exactly_three_chats(cache_user_id: int) -> None:
    chats = [_id() for _ in range(4)]
    for chat_id in chats:
        await cache.ai_history_append(
            user_id=cache_user_id, chat_id=chat_id, message=_message(f"in {chat_id}")
        )
    assert await cache.ai_cached_chat_ids(user_id=cache_user_id) == chats[:0:-1]
    client = cache.redis_client()
    assert client.exists(cache.ai_key(cache_user_id, chats[0])) == 0
    assert all(client.exists(cache.ai_key(cache_user_id, c)) for c in chats[1:])
    evicted = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chats[0], expected_done_count=1
    )
    assert evicted == cache.HistoryResult(messages=None, reason="cache_miss")


async def test_touching_an_old_chat_keeps_it_and_evicts_the_least_recent(
    cache_user_id: int,
) -> None:
    a, b, c, d = (_id() for _ in range(4))
    for chat_id in (a, b, c):
        await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("x"))
    hit = await cache.ai_history_load(user_id=cache_user_id, chat_id=a, expected_done_count=1)
    assert hit.messages is not None
    await cache.ai_history_append(user_id=cache_user_id, chat_id=d, message=_message("y"))
    assert await cache.ai_cached_chat_ids(user_id=cache_user_id) == [d, a, c]


async def test_eviction_takes_embeds_no_remaining_chat_references(cache_user_id: int) -> None:
    a, b, c, d = (_id() for _ in range(4))
    only_a, shared = _id(), _id()
    await cache.ai_history_append(user_id=cache_user_id, chat_id=a, message=_message("a"))
    await cache.embed_cache_put(
        user_id=cache_user_id, chat_id=a, embed_id=only_a, content={"result": "only a"}
    )
    await cache.embed_cache_put(
        user_id=cache_user_id, chat_id=a, embed_id=shared, content={"result": "shared"}
    )
    for chat_id in (b, c):
        await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("z"))
    await cache.embed_cache_reference(user_id=cache_user_id, chat_id=c, embed_id=shared)
    await cache.ai_history_append(user_id=cache_user_id, chat_id=d, message=_message("d"))
    assert await cache.embed_cache_get(user_id=cache_user_id, embed_id=only_a) is None
    assert await cache.embed_cache_get(user_id=cache_user_id, embed_id=shared) == {
        "result": "shared"
    }


async def test_ttls_are_72h_1h_24h(cache_user_id: int) -> None:
    chat_id, embed_id = _id(), _id()
    await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("t"))
    await cache.embed_cache_put(
        user_id=cache_user_id, chat_id=chat_id, embed_id=embed_id, content={"r": 1}
    )
    cache.sync_cache_put(
        user_id=cache_user_id,
        chat_id=chat_id,
        version=3,
        messages=[{"message_id": _id(), "encrypted_content": "AQ=="}],
    )
    client = cache.redis_client()
    assert 72 * 3600 - 5 <= client.ttl(cache.ai_key(cache_user_id, chat_id)) <= 72 * 3600
    assert 3600 - 5 <= client.ttl(cache.sync_key(cache_user_id, chat_id)) <= 3600
    assert 24 * 3600 - 5 <= client.ttl(cache.embed_key(embed_id)) <= 24 * 3600


async def test_a_rotated_transit_key_still_reads_the_cache(cache_user_id: int) -> None:
    chat_id = _id()
    messages = [_message("before rotation"), _message("answer", role="assistant")]
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    key_name = vault.user_key_name(cache_user_id)
    assert vault.rotate_key(key_name) == 2
    crypto.forget_key(key_name)
    result = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=2
    )
    assert result == cache.HistoryResult(messages=messages)


async def test_a_replaced_key_fails_then_the_client_history_is_recached(
    cache_user_id: int,
) -> None:
    chat_id = _id()
    messages = [_message("hello"), _message("hi there", role="assistant")]
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    key_name = vault.user_key_name(cache_user_id)
    vault.delete_key(key_name)
    crypto.forget_key(key_name)
    vault.ensure_key(key_name)
    failed = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=2
    )
    assert failed == cache.HistoryResult(messages=None, reason="decryption_failed")
    # The client answers request_chat_history; the server re-caches under the new key.
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    again = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=2
    )
    assert again == cache.HistoryResult(messages=messages)


async def test_flushed_redis_is_a_cache_miss_never_an_empty_history(cache_user_id: int) -> None:
    chat_id = _id()
    await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("q"))
    cache.redis_client().flushdb()
    result = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=1
    )
    assert result == cache.HistoryResult(messages=None, reason="cache_miss")
    fresh = await cache.ai_history_load(user_id=cache_user_id, chat_id=_id(), expected_done_count=0)
    assert fresh == cache.HistoryResult(messages=[])


async def test_fewer_cached_than_done_messages_is_incomplete(cache_user_id: int) -> None:
    chat_id = _id()
    for text in ("one", "two"):
        await cache.ai_history_append(
            user_id=cache_user_id, chat_id=chat_id, message=_message(text)
        )
    result = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=3
    )
    assert result == cache.HistoryResult(messages=None, reason="incomplete")


async def test_a_repeated_message_id_is_cached_once(cache_user_id: int) -> None:
    chat_id = _id()
    message = _message("draft")
    await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=message)
    await cache.ai_history_append(
        user_id=cache_user_id, chat_id=chat_id, message={**message, "content": "final"}
    )
    result = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=1
    )
    assert result.messages == [{**message, "content": "final"}]


async def test_a_warm_follow_up_needs_no_vault_call(cache_user_id: int) -> None:
    chat_id = _id()
    await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("w"))
    before = vault.call_count()
    for turn in range(5):
        loaded = await cache.ai_history_load(
            user_id=cache_user_id, chat_id=chat_id, expected_done_count=1 + 2 * turn
        )
        assert loaded.messages is not None
        await cache.ai_history_append(
            user_id=cache_user_id, chat_id=chat_id, message=_message(f"q{turn}")
        )
        await cache.ai_history_append(
            user_id=cache_user_id, chat_id=chat_id, message=_message(f"a{turn}", "assistant")
        )
    assert vault.call_count() - before == 0


async def test_cached_entries_hold_no_plaintext(cache_user_id: int) -> None:
    chat_id, embed_id = _id(), _id()
    secret = "plaintext-marker-" + _id()
    await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message(secret))
    await cache.embed_cache_put(
        user_id=cache_user_id, chat_id=chat_id, embed_id=embed_id, content={"text": secret}
    )
    client: Any = cache.redis_client()
    raw = b"".join(client.lrange(cache.ai_key(cache_user_id, chat_id), 0, -1))
    raw += client.get(cache.embed_key(embed_id)) or b""
    assert secret.encode() not in raw
    assert len(raw) > len(secret) * 2


def test_the_sync_cache_refuses_plaintext(cache_user_id: int) -> None:
    with pytest.raises(ValueError, match="ciphertext only"):
        cache.sync_cache_put(
            user_id=cache_user_id,
            chat_id=_id(),
            version=1,
            messages=[{"message_id": _id(), "content": "plain"}],
        )


async def test_prune_caches_removes_one_user_or_everyone(cache_user_id: int) -> None:
    other = cache_user_id + 1
    vault.ensure_key(vault.user_key_name(other))
    try:
        mine, theirs = _id(), _id()
        await cache.ai_history_append(user_id=cache_user_id, chat_id=mine, message=_message("m"))
        await cache.embed_cache_put(
            user_id=cache_user_id, chat_id=mine, embed_id=_id(), content={"r": 1}
        )
        await cache.ai_history_append(user_id=other, chat_id=theirs, message=_message("t"))
        client = cache.redis_client()
        out = io.StringIO()
        call_command("prune_caches", "--user", str(cache_user_id), stdout=out)
        assert out.getvalue().startswith("removed ")
        assert client.keys(f"user:{cache_user_id}:*") == []
        assert client.exists(cache.ai_key(other, theirs)) == 1
        call_command("prune_caches", stdout=io.StringIO())
        assert client.keys("user:*") == []
        assert client.keys("embed:*") == []
    finally:
        cache.prune(user_id=other)
        vault.delete_key(vault.user_key_name(other))


async def test_more_concurrent_calls_than_pooled_connections_wait_instead_of_failing() -> None:
    # Each BLPOP holds its connection for 0.2 s; 150 at once is past both this pool's
    # size and the 100 at which redis-py's default pool raised "Too many connections".
    key = f"test:blocking-pool:{_id()}"
    client = cache.aredis_client()
    calls = 150
    assert calls > settings.REDIS_POOL_MAX_CONNECTIONS
    results = await asyncio.gather(*(client.blpop([key], timeout=0.2) for _ in range(calls)))
    assert results == [None] * calls


def test_more_threads_than_pooled_connections_share_the_sync_client() -> None:
    key = f"test:blocking-pool:{_id()}"
    client = cache.redis_client()
    with ThreadPoolExecutor(max_workers=120) as pool:
        results = list(pool.map(lambda _: client.blpop([key], timeout=0.2), range(120)))
    assert results == [None] * 120


async def test_a_turn_reads_and_marks_its_cached_history_in_one_round_trip(
    cache_user_id: int,
) -> None:
    chat_id, other = _id(), _id()
    messages = [_message("q"), _message("a", role="assistant")]
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    await cache.ai_history_append(user_id=cache_user_id, chat_id=other, message=_message("o"))
    await cache.aredis_client().ping()  # a warm connection: no handshake in the count
    with round_trips() as count:
        loaded = await cache.ai_history_load(
            user_id=cache_user_id, chat_id=chat_id, expected_done_count=2
        )
    assert count[0] == 1
    assert loaded.messages == messages
    assert await cache.ai_cached_chat_ids(user_id=cache_user_id) == [chat_id, other]


async def test_a_turn_appends_question_and_reply_in_one_round_trip(cache_user_id: int) -> None:
    chats = [_id() for _ in range(4)]
    for chat_id in chats[:3]:
        await cache.ai_history_append(user_id=cache_user_id, chat_id=chat_id, message=_message("x"))
    question, reply = _message("q"), _message("a", role="assistant")
    await cache.aredis_client().ping()
    with round_trips() as count:
        await cache.ai_history_extend(
            user_id=cache_user_id, chat_id=chats[3], messages=[question, reply]
        )
    assert count[0] == 1
    loaded = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chats[3], expected_done_count=2
    )
    assert loaded.messages == [question, reply]
    # The same script kept the user's three most recent chats.
    assert await cache.ai_cached_chat_ids(user_id=cache_user_id) == chats[:0:-1]
    assert cache.redis_client().ttl(cache.ai_key(cache_user_id, chats[3])) > 0


async def test_storing_many_messages_at_once_keeps_them_all_in_order(cache_user_id: int) -> None:
    chat_id = _id()
    messages = [_message(f"m{n}") for n in range(2500)]  # past one script's stack of values
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    loaded = await cache.ai_history_load(
        user_id=cache_user_id, chat_id=chat_id, expected_done_count=2500
    )
    assert loaded.messages == messages


async def test_a_partial_read_opens_only_the_newest_entries_in_one_round_trip(
    cache_user_id: int,
) -> None:
    chat_id = _id()
    messages = [_message(f"m{n}") for n in range(10)]
    await cache.ai_history_store(user_id=cache_user_id, chat_id=chat_id, messages=messages)
    await cache.aredis_client().ping()
    with round_trips() as count:
        newest = await cache.ai_history_read(user_id=cache_user_id, chat_id=chat_id, newest=4)
    assert count[0] == 1
    assert (newest.messages, newest.skipped) == (messages[6:], 6)
    # A window as large as the cache, or none, reads it all.
    for asked in (10, 50, None):
        whole = await cache.ai_history_read(user_id=cache_user_id, chat_id=chat_id, newest=asked)
        assert (whole.messages, whole.skipped) == (messages, 0)


def _ids(history: cache.HistoryResult) -> list[str] | None:
    return None if history.messages is None else [m["message_id"] for m in history.messages]


def test_a_window_serves_the_newest_part_of_the_branch_it_holds_without_a_gap() -> None:
    window = [{"message_id": i, "role": "user", "content": i} for i in ("c", "x", "d", "e")]
    read = cache.CachedHistory(messages=window, skipped=3)
    # The branch a..e; x is another branch's: the newest three are held in a row.
    assert _ids(read.along(("a", "b", "c", "d", "e"), {"x"}, need=3)) == ["c", "d", "e"]
    assert _ids(read.along(("a", "b", "c", "d", "e"), {"x"}, need=2)) == ["c", "d", "e"]
    # Fewer than needed, a gap (e missing from the branch's end), or the branch's start
    # reached (older entries may be imported history before it): read everything.
    short = cache.HistoryResult(messages=None, reason=cache.WINDOW_SHORT)
    assert read.along(("a", "b", "c", "d", "e"), {"x"}, need=4) == short
    assert read.along(("a", "b", "c", "d", "e", "f"), {"x"}, need=2) == short
    assert read.along(("c", "d", "e"), {"x"}, need=2) == short
    assert read.along(("a", "b", "c", "d", "e"), {"x"}) == short
    # The whole cache read (nothing skipped) keeps its meaning.
    whole = cache.CachedHistory(messages=window)
    assert _ids(whole.along(("c", "d", "e"), {"x"})) == ["c", "d", "e"]
