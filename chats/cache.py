"""The server's short-lived chat caches in Redis (docs/architecture.md §4, docs/crypto.md §4-§5).

Keys (exactly docs/architecture.md §4's, no prefix):

* ``user:{uid}:chat:{cid}:messages:ai`` — the AI cache: a Redis list, one entry per
  message, each entry a docs/crypto.md §4 envelope (purpose ``ai-cache``, object id the chat
  id) of ``{"message_id", "role", "content", ...}`` as JSON. 72 h; only the user's 3 most
  recently active chats (``user:{uid}:chats:ai``, a sorted set of chat id → last activity)
  are kept: a fourth active chat evicts the oldest, with its embeds unless a remaining
  chat references them (``user:{uid}:chat:{cid}:embeds:ai``, a set of embed ids).
* ``user:{uid}:chat:{cid}:messages:sync`` — the sync cache: client ciphertext only, as
  JSON ``{"version": chat version, "messages": [...]}``; 1 h.
* ``embed:{id}`` — the embed cache: an envelope (purpose ``embed``, object id the embed
  id); 24 h. ``user:{uid}:embeds`` lists a user's cached embeds for pruning.
* ``chat:{cid}:memory_consent`` — written by the pipeline, evicted with the chat here.
* ``om:chat:{cid}:deleted`` — set when the chat is deleted (``DELETED_CHAT_TTL_S``): its
  running turns stop and write nothing of it any more (``pipeline.state``).

Opening an entry needs no Vault call once the user's data key is warm in this process
(``openmates.crypto``). The hot path is async (``redis.asyncio``); pruning and the sync
cache are sync (management commands, ``chats.sync``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from openmates import crypto, vault
from openmates import redis_client as redis_clients

AI_CACHE_TTL_S = 72 * 3600
SYNC_CACHE_TTL_S = 3600
EMBED_CACHE_TTL_S = 24 * 3600
AI_CACHE_CHATS = 3
AI_PURPOSE = "ai-cache"
EMBED_PURPOSE = "embed"


def ai_key(user_id: int | str, chat_id: str) -> str:
    return f"user:{user_id}:chat:{chat_id}:messages:ai"


def sync_key(user_id: int | str, chat_id: str) -> str:
    return f"user:{user_id}:chat:{chat_id}:messages:sync"


def embed_key(embed_id: str) -> str:
    return f"embed:{embed_id}"


def consent_key(chat_id: str) -> str:
    return f"chat:{chat_id}:memory_consent"


def pending_text_key(message_id: str) -> str:
    """A user message's sealed text the pipeline keeps for ``message.retry``."""
    return f"om:pending:{message_id}"


def chat_notes_key(chat_id: str) -> str:
    """The pipeline's sealed notes on a chat (title, summary, language)."""
    return f"om:chat:{chat_id}:ai-meta"


def deleted_chat_key(chat_id: str) -> str:
    """The mark of a deleted chat, which its turns (in any process) check."""
    return f"om:chat:{chat_id}:deleted"


# Longer than any turn lives once cancelled (its post-processing included).
DELETED_CHAT_TTL_S = 3600


def lru_key(user_id: int | str) -> str:
    return f"user:{user_id}:chats:ai"


def chat_embeds_key(user_id: int | str, chat_id: str) -> str:
    return f"user:{user_id}:chat:{chat_id}:embeds:ai"


def user_embeds_key(user_id: int | str) -> str:
    return f"user:{user_id}:embeds"


@dataclass(frozen=True)
class HistoryResult:
    """What the AI cache holds for a turn.

    ``messages`` is a list of ``{"message_id", "role", "content", ...}`` (oldest first)
    when usable; otherwise ``None`` and ``reason`` says why the client must be asked
    (``"cache_miss"``, ``"decryption_failed"`` or ``"incomplete"``).
    """

    messages: list[dict[str, Any]] | None
    reason: str | None = None


# ``HistoryResult.reason`` of a partial read (``ai_history_read(newest=...)``) that does not
# hold the part of the branch the caller needs: read the whole cache, not the client.
WINDOW_SHORT = "window_short"


def _texts(values: Any) -> list[str]:
    """Redis replies (bytes) as text; redis-py's stubs type them loosely."""
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def _count(reply: Any) -> int:
    return int(reply)


# --- Redis clients -------------------------------------------------------------------

# The process's shared clients (openmates.redis_client), under the names this module's
# callers use: one async client per event loop, one sync client.
aredis_client = redis_clients.async_client
redis_client = redis_clients.sync_client


# touch(): mark chat ARGV[2] active in the user's LRU set (KEYS[1]) and evict chats beyond
# the newest ARGV[4], with their embeds unless a remaining chat references them. Inside
# one script, so concurrent turns in several processes cannot interleave between "who is
# fourth" and "delete it". The scripts below run it together with their own reads and
# writes: one round trip each.
_TOUCH_FUNCTION = """
local function touch()
  local lru = KEYS[1]
  local uid, cid = ARGV[1], ARGV[2]
  local now, keep, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local base = 'user:' .. uid .. ':chat:'
  redis.call('ZREMRANGEBYSCORE', lru, '-inf', now - ttl)
  redis.call('ZADD', lru, now, cid)
  redis.call('EXPIRE', lru, ttl)
  local evicted = redis.call('ZREVRANGE', lru, keep, -1)
  if #evicted == 0 then return evicted end
  local remaining = redis.call('ZREVRANGE', lru, 0, keep - 1)
  for _, old in ipairs(evicted) do
    local embeds = redis.call('SMEMBERS', base .. old .. ':embeds:ai')
    for _, eid in ipairs(embeds) do
      local used = false
      for _, other in ipairs(remaining) do
        if redis.call('SISMEMBER', base .. other .. ':embeds:ai', eid) == 1 then
          used = true
          break
        end
      end
      if not used then
        redis.call('DEL', 'embed:' .. eid)
        redis.call('SREM', 'user:' .. uid .. ':embeds', eid)
      end
    end
    redis.call('DEL', base .. old .. ':messages:ai', base .. old .. ':embeds:ai',
               'chat:' .. old .. ':memory_consent')
    redis.call('ZREM', lru, old)
  end
  return evicted
end
"""
# The chat's cached entries (KEYS[2]), only the newest ARGV[6] when that is above 0, as
# {entries left unread, entries}; a non-empty cache marks the chat active.
_LOAD_LUA = (
    _TOUCH_FUNCTION
    + """
local newest = tonumber(ARGV[6])
local skipped = 0
if newest > 0 then skipped = math.max(redis.call('LLEN', KEYS[2]) - newest, 0) end
local entries = redis.call('LRANGE', KEYS[2], skipped, -1)
if #entries > 0 then touch() end
return {skipped, entries}
"""
)
# Append ARGV[7..] to the chat's cache (KEYS[2]), after emptying it when ARGV[6] is
# 'replace'; the cache lives ARGV[5] s; the chat becomes active. Returns the evicted ids.
_WRITE_LUA = (
    _TOUCH_FUNCTION
    + """
if ARGV[6] == 'replace' then redis.call('DEL', KEYS[2]) end
-- In slices: unpack() of thousands of values would overflow Lua's stack.
for first = 7, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, first, math.min(first + 999, #ARGV)))
end
if #ARGV > 6 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5])) end
return touch()
"""
)


def _touch_args(user_id: int | str, chat_id: str) -> list[Any]:
    return [
        lru_key(user_id),
        ai_key(user_id, chat_id),
        str(user_id),
        chat_id,
        repr(time.time()),
        str(AI_CACHE_CHATS),
        str(AI_CACHE_TTL_S),
    ]


# --- AI cache ------------------------------------------------------------------------


async def _seal_message(user_id: int | str, chat_id: str, message: dict[str, Any]) -> bytes:
    for field in ("message_id", "role", "content"):
        if field not in message:
            raise ValueError(f"a cached message needs {field!r}")
    return await crypto.aseal(
        key_name=vault.user_key_name(user_id),
        purpose=AI_PURPOSE,
        owner_id=user_id,
        object_id=chat_id,
        plaintext=json.dumps(message, ensure_ascii=False).encode("utf-8"),
    )


@dataclass(frozen=True)
class CachedHistory:
    """A chat's AI cache as read, before it is checked against PostgreSQL.

    ``messages``: the distinct cached messages, oldest first (empty when nothing is
    cached), or ``None`` when an entry did not decrypt. ``skipped``: how many older
    entries a partial read left unread (0: the whole cache was read).
    """

    messages: list[dict[str, Any]] | None
    skipped: int = 0

    def complete_for(self, expected_done_count: int) -> HistoryResult:
        """The history a turn may use, given how many ``done`` messages the chat has."""
        if self.messages is None:
            return HistoryResult(messages=None, reason="decryption_failed")
        if not self.messages:
            if expected_done_count <= 0:
                return HistoryResult(messages=[])
            return HistoryResult(messages=None, reason="cache_miss")
        if len(self.messages) < expected_done_count:
            return HistoryResult(messages=None, reason="incomplete")
        return HistoryResult(messages=list(self.messages))

    def along(
        self, path: Sequence[str], off_branch: Collection[str], *, need: int | None = None
    ) -> HistoryResult:
        """The history of one branch of the chat (``chats.selectors.Branch``): the cached
        messages but those ``off_branch``, those on ``path`` in its order after any the
        chat does not hold as messages (a client's imported history). Usable when every
        message of ``path`` is cached; else the reason to ask the client.

        After a partial read (``skipped`` > 0) it is the newest part of ``path`` the read
        holds without a gap, when that is at least its newest ``need`` messages (None:
        all of them) and does not reach the start of ``path`` (older entries may then be
        imported history); otherwise :data:`WINDOW_SHORT`."""
        if self.messages is None:
            return HistoryResult(messages=None, reason="decryption_failed")
        if self.skipped:
            return self._along_window(path, off_branch, need)
        place = {message_id: index for index, message_id in enumerate(path)}
        kept = [m for m in self.messages if str(m["message_id"]) not in off_branch]
        if not place.keys() <= {str(m["message_id"]) for m in kept}:
            reason = "incomplete" if self.messages else "cache_miss"
            return HistoryResult(messages=None, reason=reason)
        kept.sort(key=lambda m: place.get(str(m["message_id"]), -1))
        return HistoryResult(messages=kept)

    def _along_window(
        self, path: Sequence[str], off_branch: Collection[str], need: int | None
    ) -> HistoryResult:
        by_id = {
            str(m["message_id"]): m
            for m in self.messages or ()
            if str(m["message_id"]) not in off_branch
        }
        newest: list[dict[str, Any]] = []
        for message_id in reversed(path):
            message = by_id.get(message_id)
            if message is None:
                break
            newest.append(message)
        wanted = len(path) if need is None else min(need, len(path))
        if len(newest) < wanted or len(newest) == len(path):
            return HistoryResult(messages=None, reason=WINDOW_SHORT)
        newest.reverse()
        return HistoryResult(messages=newest)


async def ai_history_read(
    *, user_id: int | str, chat_id: str, newest: int | None = None
) -> CachedHistory:
    """Read a chat's AI cache (one Redis round trip); check it with ``complete_for`` or
    ``along``. With ``newest`` only that many of the newest entries are read and opened
    (a turn needs the end of a long chat, not all of it; ``CachedHistory.skipped``
    counts the others).

    A repeated message id keeps its last read version at its first position. Reading
    a non-empty cache marks the chat active (LRU), in the same script; when it then
    proves incomplete or undecryptable the turn asks the client and stores what it
    sends, which marks the chat active all the same. A turn reads it while it counts
    the chat's done messages in PostgreSQL.

    Raises:
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
        redis.exceptions.RedisError: Redis is unreachable.
    """
    skipped, entries = await aredis_client().eval(
        _LOAD_LUA, 2, *_touch_args(user_id, chat_id), str(newest or 0)
    )
    try:
        # One cipher for the whole list: every entry of a chat is sealed for it alike.
        opened = await crypto.aopen_sealed_many(
            key_name=vault.user_key_name(user_id),
            purpose=AI_PURPOSE,
            owner_id=user_id,
            object_id=chat_id,
            sealed=entries,
        )
    except crypto.DecryptionError:
        return CachedHistory(messages=None)
    by_id: dict[str, dict[str, Any]] = {}
    # One parse for the whole list: the entries are JSON objects, so joined they are an array.
    for message in json.loads(b"[" + b",".join(opened) + b"]") if opened else ():
        by_id[str(message["message_id"])] = message
    return CachedHistory(messages=list(by_id.values()), skipped=int(skipped))


async def ai_history_load(
    *, user_id: int | str, chat_id: str, expected_done_count: int
) -> HistoryResult:
    """Load a chat's history from the AI cache for a turn (one Redis round trip).

    ``expected_done_count`` is the number of ``done`` messages PostgreSQL holds for the
    chat; a cache holding fewer distinct messages is ``incomplete``. A chat with no done
    message and nothing cached is new: an empty history, not a miss. See
    :func:`ai_history_read` for the LRU mark and the errors raised.
    """
    cached = await ai_history_read(user_id=user_id, chat_id=chat_id)
    return cached.complete_for(expected_done_count)


async def _history_write(
    user_id: int | str, chat_id: str, messages: list[dict[str, Any]], mode: str
) -> list[str]:
    sealed = [await _seal_message(user_id, chat_id, message) for message in messages]
    evicted = await aredis_client().eval(
        _WRITE_LUA, 2, *_touch_args(user_id, chat_id), mode, *sealed
    )
    return _texts(evicted)


async def ai_history_store(
    *, user_id: int | str, chat_id: str, messages: list[dict[str, Any]]
) -> None:
    """Replace the chat's AI cache with ``messages`` (a client's ``chat.history``).

    Each message is ``{"message_id", "role", "content", ...}``, oldest first; it is
    re-encrypted under the user's current data key. Marks the chat active (LRU). One
    Redis round trip.

    Raises:
        ValueError: a message lacks ``message_id``, ``role`` or ``content``.
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    await _history_write(user_id, chat_id, messages, "replace")


async def ai_history_extend(
    *, user_id: int | str, chat_id: str, messages: list[dict[str, Any]]
) -> None:
    """Append messages (``{"message_id", "role", "content", ...}``, oldest first) to the
    AI cache in one Redis round trip (a turn's question and reply).

    Marks the chat active; a fourth active chat evicts the least recently active one.

    Raises:
        ValueError: a message lacks ``message_id``, ``role`` or ``content`` (nothing is
            written then).
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    await _history_write(user_id, chat_id, messages, "append")


async def ai_history_append(*, user_id: int | str, chat_id: str, message: dict[str, Any]) -> None:
    """Append one message to the AI cache (:func:`ai_history_extend` with one)."""
    await ai_history_extend(user_id=user_id, chat_id=chat_id, messages=[message])


async def ai_cached_chat_ids(*, user_id: int | str) -> list[str]:
    """The chats the user's AI cache holds, most recently active first."""
    return _texts(await aredis_client().zrevrange(lru_key(user_id), 0, -1))


# --- Embed cache ---------------------------------------------------------------------


async def embed_cache_put(
    *, user_id: int | str, chat_id: str, embed_id: str, content: dict[str, Any]
) -> None:
    """Cache an embed's content (JSON-able dict) for 24 h, referenced by its chat.

    Raises:
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    sealed = await crypto.aseal(
        key_name=vault.user_key_name(user_id),
        purpose=EMBED_PURPOSE,
        owner_id=user_id,
        object_id=embed_id,
        plaintext=json.dumps(content, ensure_ascii=False).encode("utf-8"),
    )
    refs = chat_embeds_key(user_id, chat_id)
    async with aredis_client().pipeline(transaction=True) as pipe:
        pipe.set(embed_key(embed_id), sealed, ex=EMBED_CACHE_TTL_S)
        pipe.sadd(refs, embed_id)
        pipe.expire(refs, AI_CACHE_TTL_S)
        pipe.sadd(user_embeds_key(user_id), embed_id)
        pipe.expire(user_embeds_key(user_id), AI_CACHE_TTL_S)
        await pipe.execute()


async def embed_cache_get(*, user_id: int | str, embed_id: str) -> dict[str, Any] | None:
    """The cached embed content, or ``None`` when absent or no longer decryptable.

    Raises:
        openmates.vault.VaultError: Vault is unreachable on a cold data key.
    """
    sealed: Any = await aredis_client().get(embed_key(embed_id))
    if sealed is None:
        return None
    try:
        plaintext = await crypto.aopen_sealed(
            key_name=vault.user_key_name(user_id),
            purpose=EMBED_PURPOSE,
            owner_id=user_id,
            object_id=embed_id,
            sealed=sealed,
        )
    except crypto.DecryptionError:
        return None
    loaded: dict[str, Any] = json.loads(plaintext)
    return loaded


async def embed_cache_reference(*, user_id: int | str, chat_id: str, embed_id: str) -> None:
    """Record that ``chat_id`` references an already cached embed (keeps it on eviction)."""
    refs = chat_embeds_key(user_id, chat_id)
    async with aredis_client().pipeline(transaction=True) as pipe:
        pipe.sadd(refs, embed_id)
        pipe.expire(refs, AI_CACHE_TTL_S)
        await pipe.execute()


# --- Sync cache (client ciphertext only) ---------------------------------------------


def sync_cache_get(
    *, user_id: int | str, chat_id: str, version: int
) -> list[dict[str, Any]] | None:
    """The chat's cached sync messages if cached at chat version ``version``, else ``None``."""
    raw = redis_client().get(sync_key(user_id, chat_id))
    if raw is None:
        return None
    entry = json.loads(raw)
    if entry.get("version") != version:
        return None
    messages: list[dict[str, Any]] = entry["messages"]
    return messages


def sync_cache_put(
    *, user_id: int | str, chat_id: str, version: int, messages: list[dict[str, Any]]
) -> None:
    """Cache a chat's messages for sign-in sync (1 h).

    ``messages`` must hold client ciphertext and metadata only — never plaintext.
    """
    for message in messages:
        if "content" in message:
            raise ValueError("the sync cache holds client ciphertext only")
    raw = json.dumps({"version": version, "messages": messages}, separators=(",", ":"))
    redis_client().set(sync_key(user_id, chat_id), raw, ex=SYNC_CACHE_TTL_S)


# --- Eviction and pruning ------------------------------------------------------------


def chat_forget(
    *,
    user_id: int | str,
    chat_id: str,
    embed_ids: list[str] | None = None,
    message_ids: list[str] | None = None,
) -> None:
    """Drop every cache entry of one chat (after the chat was deleted) and mark it deleted
    (``deleted_chat_key``), so its running turns stop and write nothing of it again.

    ``message_ids``: user messages whose kept text for ``message.retry`` goes too.
    """
    client = redis_client()
    ids = set(_texts(client.smembers(chat_embeds_key(user_id, chat_id)))) | set(embed_ids or [])
    keys = [
        ai_key(user_id, chat_id),
        sync_key(user_id, chat_id),
        chat_embeds_key(user_id, chat_id),
        consent_key(chat_id),
        chat_notes_key(chat_id),
        *(embed_key(e) for e in ids),
        *(pending_text_key(m) for m in message_ids or []),
    ]
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(*keys)
        pipe.zrem(lru_key(user_id), chat_id)
        if ids:
            pipe.srem(user_embeds_key(user_id), *ids)
        pipe.set(deleted_chat_key(chat_id), 1, ex=DELETED_CHAT_TTL_S)
        pipe.execute()


async def achat_forget(
    *, user_id: int | str, chat_id: str, message_ids: list[str] | None = None
) -> None:
    """Async twin of :func:`chat_forget` (runs it off the event loop)."""
    await asyncio.to_thread(chat_forget, user_id=user_id, chat_id=chat_id, message_ids=message_ids)


_ALL_PATTERNS = (
    "user:*:chat:*",
    "user:*:chats:ai",
    "user:*:embeds",
    "embed:*",
    "chat:*:memory_consent",
    "om:chat:*:ai-meta",
    "om:pending:*",
)


def _scan_delete(client: redis.Redis, pattern: str) -> int:
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=500):
        batch.append(key)
        if len(batch) >= 500:
            removed += _count(client.delete(*batch))
            batch = []
    if batch:
        removed += _count(client.delete(*batch))
    return removed


def prune(
    *,
    user_id: int | str | None = None,
    chat_ids: list[str] | None = None,
    message_ids: list[str] | None = None,
) -> int:
    """Remove cache entries: one user's (AI, sync, embed, consent, the pipeline's chat
    notes and kept texts) or, with no user, all.

    ``chat_ids`` adds chats whose consent keys and notes should go too (a user's chats
    from the database; the LRU set names only the cached ones); ``message_ids`` user
    messages whose kept text for ``message.retry`` goes too. Returns the number of keys
    removed.
    """
    client = redis_client()
    if user_id is None:
        return sum(_scan_delete(client, pattern) for pattern in _ALL_PATTERNS)
    embeds = set(_texts(client.smembers(user_embeds_key(user_id))))
    chats = set(_texts(client.zrange(lru_key(user_id), 0, -1)))
    chats |= set(chat_ids or [])
    removed = _scan_delete(client, f"user:{user_id}:*")
    keys = [
        *(embed_key(e) for e in embeds),
        *(consent_key(c) for c in chats),
        *(chat_notes_key(c) for c in chats),
        *(pending_text_key(m) for m in message_ids or []),
    ]
    if keys:
        removed += _count(client.delete(*keys))
    return removed


async def aprune(
    *,
    user_id: int | str | None = None,
    chat_ids: list[str] | None = None,
    message_ids: list[str] | None = None,
) -> int:
    """Async twin of :func:`prune` (runs it off the event loop)."""
    return await asyncio.to_thread(
        prune, user_id=user_id, chat_ids=chat_ids, message_ids=message_ids
    )
