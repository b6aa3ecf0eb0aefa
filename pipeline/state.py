"""Turn state shared through Redis by every server process (docs/architecture.md §5).

Keys (all under ``om:``):

* ``turn:chat:{cid}`` — the chat's lease: the running task id, expiring after
  ``LEASE_TTL_S`` unless its process renews it (heartbeat);
* ``turn:chat:{cid}:queue`` — task ids waiting for the lease, oldest first; a waiter keeps
  ``turn:{tid}:alive`` fresh, so a waiter whose process died is skipped;
* ``turn:{tid}`` — the task record (hash: user_id, chat_id, message_id,
  assistant_message_id, owner = the owning process's channel, state queued|running);
* ``turn:user:{uid}`` — the user's task ids; ``turns:running`` — every live task id (what
  the reaper scans);
* ``turn:{tid}:snapshot`` — the sealed text so far (docs/crypto.md §4, purpose ``ai-cache``);
* ``turn:{tid}:cancel`` — the cancel flag;
* ``rl:{uid}:{kind}:{window}`` — fixed-window rate-limit counters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings

from chats import cache as chat_cache
from memories import selectors as memory_selectors
from memories import services as memory_services
from openmates import crypto, vault
from openmates import redis_client as redis_clients
from openmates.db import db_call

PREFIX = "om:"
SNAPSHOT_PURPOSE = "ai-cache"
RECORD_TTL_S = 24 * 3600
FLAG_TTL_S = 3600


def lease_ttl_s() -> float:
    """Seconds a lease outlives its last heartbeat (``PIPELINE_LEASE_TTL_S``, default 30)."""
    return float(settings.PIPELINE_LEASE_TTL_S)


def alive_ttl_s() -> float:
    """Seconds a task outlives its process's last heartbeat before the reaper ends it."""
    return float(settings.PIPELINE_ALIVE_TTL_S)


# The process's shared async client: one per event loop (openmates.redis_client).
redis_client = redis_clients.async_client


def _lease_key(chat_id: str) -> str:
    return f"{PREFIX}turn:chat:{chat_id}"


def _queue_key(chat_id: str) -> str:
    return f"{PREFIX}turn:chat:{chat_id}:queue"


def _record_key(task_id: str) -> str:
    return f"{PREFIX}turn:{task_id}"


def _alive_key(task_id: str) -> str:
    return f"{PREFIX}turn:{task_id}:alive"


def _user_key(user_id: int | str) -> str:
    return f"{PREFIX}turn:user:{user_id}"


def _snapshot_key(task_id: str) -> str:
    return f"{PREFIX}turn:{task_id}:snapshot"


def _cancel_key(task_id: str) -> str:
    return f"{PREFIX}turn:{task_id}:cancel"


_RUNNING_KEY = f"{PREFIX}turns:running"

# acquire(): take the lease (KEYS[1]) when it is free and the task (ARGV[1]) is first in
# line; otherwise queue the task (KEYS[2]). The task's own alive key (KEYS[3]) is
# refreshed first, for ARGV[4] ms; heads whose waiter stopped refreshing theirs (a dead
# process) are dropped. Returns 0 when the lease was taken (for ARGV[2] ms), else the
# task's 1-based queue position.
_ACQUIRE_FUNCTION = """
local function acquire()
  local lease, queue, task, ttl, prefix = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[4])
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if (not head) or head == task then break end
    if redis.call('EXISTS', prefix .. 'turn:' .. head .. ':alive') == 1 then break end
    redis.call('LPOP', queue)
  end
  local holder = redis.call('GET', lease)
  if holder == task then return 0 end
  if not holder then
    local head = redis.call('LINDEX', queue, 0)
    if (not head) or head == task then
      if head then redis.call('LPOP', queue) end
      redis.call('SET', lease, task, 'PX', ttl)
      return 0
    end
  end
  if not redis.call('LPOS', queue, task) then redis.call('RPUSH', queue, task) end
  return redis.call('LPOS', queue, task) + 1
end
"""
_ACQUIRE = _ACQUIRE_FUNCTION + "return acquire()\n"
# acquire(), then the task's record (KEYS[4], hash fields ARGV[6..]) saved with state
# running or queued by the outcome, for ARGV[5] s, indexed by user (KEYS[5]) and in the
# running set (KEYS[6]): what record_save writes.
_ACQUIRE_AND_RECORD = (
    _ACQUIRE_FUNCTION
    + """
local position = acquire()
local ttl = tonumber(ARGV[5])
redis.call('HSET', KEYS[4], 'state', position == 0 and 'running' or 'queued',
           unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[4], ttl)
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('EXPIRE', KEYS[5], ttl)
redis.call('SADD', KEYS[6], ARGV[1])
return position
"""
)
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What every process knows about a turn (``owner``: the owning process's channel)."""

    task_id: str
    user_id: str
    chat_id: str
    message_id: str
    assistant_message_id: str
    owner: str
    state: str  # queued | running

    def active_entry(self, last_sequence: int) -> dict[str, Any]:
        """The ``task.active`` list entry for this task."""
        return {
            "chat_id": self.chat_id,
            "task_id": self.task_id,
            "message_id": self.message_id,
            "assistant_message_id": self.assistant_message_id,
            "last_sequence": last_sequence,
        }


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {_str(key): _str(value) for key, value in raw.items()}


async def lease_acquire(*, chat_id: str, task_id: str) -> int:
    """Take the chat's lease (returns 0) or queue for it (returns the 1-based position).

    One round trip, which also refreshes the task's proof of life.
    """
    result = await redis_client().eval(
        _ACQUIRE,
        3,
        _lease_key(chat_id),
        _queue_key(chat_id),
        _alive_key(task_id),
        task_id,
        int(lease_ttl_s() * 1000),
        PREFIX,
        int(alive_ttl_s() * 1000),
    )
    return int(result)


async def lease_acquire_recorded(record: TaskRecord) -> int:
    """:func:`lease_acquire` for ``record``'s task, saving its record in the same round
    trip (as :func:`record_save` does) with state ``running`` when the lease was taken
    (returns 0), else ``queued`` (returns the 1-based queue position)."""
    fields = [
        *("user_id", record.user_id, "chat_id", record.chat_id),
        *("message_id", record.message_id, "assistant_message_id", record.assistant_message_id),
        *("owner", record.owner),
    ]
    result = await redis_client().eval(
        _ACQUIRE_AND_RECORD,
        6,
        _lease_key(record.chat_id),
        _queue_key(record.chat_id),
        _alive_key(record.task_id),
        _record_key(record.task_id),
        _user_key(record.user_id),
        _RUNNING_KEY,
        record.task_id,
        int(lease_ttl_s() * 1000),
        PREFIX,
        int(alive_ttl_s() * 1000),
        RECORD_TTL_S,
        *fields,
    )
    return int(result)


async def lease_release(*, chat_id: str, task_id: str) -> None:
    """Give the lease back (or leave the queue); a lease held by another task is kept."""
    await redis_client().eval(_RELEASE, 2, _lease_key(chat_id), _queue_key(chat_id), task_id)


async def leases_renew(leases: list[tuple[str, str]]) -> None:
    """Heartbeat: extend every ``(chat_id, task_id)`` lease this process holds."""
    if not leases:
        return
    ttl_ms = int(lease_ttl_s() * 1000)
    async with redis_client().pipeline(transaction=False) as pipe:
        for chat_id, task_id in leases:
            pipe.eval(_RENEW, 1, _lease_key(chat_id), task_id, ttl_ms)
        await pipe.execute()


async def waiter_keep_alive(task_id: str) -> None:
    """A queued task's proof of life (see ``_ACQUIRE``)."""
    await redis_client().set(_alive_key(task_id), 1, px=int(alive_ttl_s() * 1000))


async def lease_holder(chat_id: str) -> str | None:
    """The task id holding the chat's lease, if any."""
    value = await redis_client().get(_lease_key(chat_id))
    return _str(value) if value else None


async def record_save(record: TaskRecord) -> None:
    """Create or update a task record and index it by user and in the running set."""
    fields: dict[Any, Any] = {
        "user_id": record.user_id,
        "chat_id": record.chat_id,
        "message_id": record.message_id,
        "assistant_message_id": record.assistant_message_id,
        "owner": record.owner,
        "state": record.state,
    }
    async with redis_client().pipeline(transaction=True) as pipe:
        pipe.hset(_record_key(record.task_id), mapping=fields)
        pipe.expire(_record_key(record.task_id), RECORD_TTL_S)
        pipe.sadd(_user_key(record.user_id), record.task_id)
        pipe.expire(_user_key(record.user_id), RECORD_TTL_S)
        pipe.sadd(_RUNNING_KEY, record.task_id)
        await pipe.execute()


async def record_get(task_id: str) -> TaskRecord | None:
    """The task record, or None when the task ended (or never existed)."""
    raw = _decode(await redis_client().hgetall(_record_key(task_id)))
    if not raw:
        return None
    return TaskRecord(task_id=task_id, **raw)


async def record_delete(record: TaskRecord) -> None:
    """Forget an ended task (its snapshot stays for late ``stream.resume``)."""
    async with redis_client().pipeline(transaction=True) as pipe:
        pipe.delete(_record_key(record.task_id), _alive_key(record.task_id))
        pipe.srem(_user_key(record.user_id), record.task_id)
        pipe.srem(_RUNNING_KEY, record.task_id)
        await pipe.execute()


async def turn_forget(record: TaskRecord) -> bool:
    """An ended turn's Redis clean-up in one round trip: the chat's lease given back (or
    the queue left; another task's lease is kept), the record deleted
    (:func:`record_delete`); returns whether its chat was deleted meanwhile (as
    :func:`chat_deleted`), read in the same round trip (one ``MULTI``)."""
    async with redis_client().pipeline(transaction=True) as pipe:
        pipe.eval(
            _RELEASE, 2, _lease_key(record.chat_id), _queue_key(record.chat_id), record.task_id
        )
        pipe.delete(_record_key(record.task_id), _alive_key(record.task_id))
        pipe.srem(_user_key(record.user_id), record.task_id)
        pipe.srem(_RUNNING_KEY, record.task_id)
        pipe.exists(chat_cache.deleted_chat_key(record.chat_id))
        replies = await pipe.execute()
    return bool(replies[-1])


async def user_records(user_id: int | str) -> list[TaskRecord]:
    """The user's queued and running tasks."""
    task_ids = [_str(tid) for tid in await redis_client().smembers(_user_key(user_id))]
    records = [await record_get(task_id) for task_id in task_ids]
    return [record for record in records if record is not None]


async def running_task_ids() -> list[str]:
    """Every task id any process announced and has not finished (the reaper's worklist)."""
    return [_str(tid) for tid in await redis_client().smembers(_RUNNING_KEY)]


async def is_alive(record: TaskRecord) -> bool:
    """Whether the task's process still vouches for it (its alive key is fresh)."""
    return bool(await redis_client().exists(_alive_key(record.task_id)))


async def alive_refresh(task_ids: list[str]) -> None:
    """Heartbeat: the owning process vouches for its tasks (queued, running, finishing)."""
    if not task_ids:
        return
    async with redis_client().pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.set(_alive_key(task_id), 1, px=int(alive_ttl_s() * 1000))
        await pipe.execute()


async def running_forget(task_id: str) -> None:
    """Drop a task id whose record is gone from the reaper's worklist."""
    await redis_client().srem(_RUNNING_KEY, task_id)


async def record_claim_for_reaping(task_id: str) -> bool:
    """True for exactly one caller per task (several processes run the reaper)."""
    claimed = await redis_client().set(f"{PREFIX}turn:{task_id}:reaping", 1, nx=True, ex=60)
    return bool(claimed)


async def cancel_flag_set(task_id: str) -> None:
    """Ask for a task's cancellation (checked by the owner between chunks)."""
    await redis_client().set(_cancel_key(task_id), 1, ex=FLAG_TTL_S)


async def cancel_flags(task_ids: list[str]) -> set[str]:
    """Which of ``task_ids`` have their cancel flag set (one round trip)."""
    if not task_ids:
        return set()
    values = await redis_client().mget([_cancel_key(task_id) for task_id in task_ids])
    return {task_id for task_id, value in zip(task_ids, values, strict=True) if value}


async def cancels_due(turns: list[tuple[str, str]]) -> set[str]:
    """Which ``(task_id, chat_id)`` turns must stop: a cancel flag or a deleted chat.

    One round trip; a chat deletion (``chats.cache.chat_forget``) marks the chat for
    ``DELETED_CHAT_TTL_S``, and turns of every process stop at their next heartbeat.
    """
    if not turns:
        return set()
    keys = [_cancel_key(t) for t, _ in turns] + [chat_cache.deleted_chat_key(c) for _, c in turns]
    values = await redis_client().mget(keys)
    flagged, deleted = values[: len(turns)], values[len(turns) :]
    return {
        task_id
        for (task_id, _), flag, gone in zip(turns, flagged, deleted, strict=True)
        if flag or gone
    }


async def chat_deleted(chat_id: str) -> bool:
    """Whether ``chat_id`` was deleted while a turn of it may still run."""
    return bool(await redis_client().exists(chat_cache.deleted_chat_key(chat_id)))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The text of a turn so far: ``content`` is deltas 1..``sequence`` joined."""

    chat_id: str
    message_id: str  # the assistant message
    sequence: int
    content: str
    status: str | None  # the final status once the turn ended, else None
    model: str = ""
    usage: dict[str, int] | None = None
    reason: str | None = None  # why a failed answer ended (docs/protocol.md §8)


# SET KEYS[1] = ARGV[1] for ARGV[2] seconds, unless KEYS[2] (a chat's deletion mark) exists.
_SET_UNLESS_DELETED = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


async def snapshot_save(*, user_id: int | str, task_id: str, snapshot: Snapshot) -> None:
    """Seal and store the turn's text so far (no Vault call once the data key is warm)."""
    await snapshots_save([(user_id, task_id, snapshot)])


async def snapshots_save(items: list[tuple[int | str, str, Snapshot]]) -> None:
    """Seal each ``(user_id, task_id, snapshot)`` and store them all in one pipeline.

    Raises ``VaultError`` (a cold data key) or ``redis.RedisError``; nothing is stored
    then.
    """
    sealed: list[tuple[str, str, bytes]] = []
    for user_id, task_id, snapshot in items:
        plaintext = json.dumps(
            {
                "chat_id": snapshot.chat_id,
                "message_id": snapshot.message_id,
                "sequence": snapshot.sequence,
                "content": snapshot.content,
                "status": snapshot.status,
                "model": snapshot.model,
                "usage": snapshot.usage,
                "reason": snapshot.reason,
            }
        ).encode()
        envelope = await crypto.aseal(
            key_name=vault.user_key_name(user_id),
            purpose=SNAPSHOT_PURPOSE,
            owner_id=user_id,
            object_id=task_id,
            plaintext=plaintext,
        )
        sealed.append((_snapshot_key(task_id), snapshot.chat_id, envelope))
    async with redis_client().pipeline(transaction=False) as pipe:
        for key, chat_id, envelope in sealed:
            # Atomically skipped for a deleted chat: nothing of it may come back.
            deleted = chat_cache.deleted_chat_key(chat_id)
            pipe.eval(_SET_UNLESS_DELETED, 2, key, deleted, envelope, FLAG_TTL_S)
        await pipe.execute()


async def snapshot_drop(task_id: str) -> None:
    """Forget a turn's snapshot (its chat was deleted)."""
    await redis_client().delete(_snapshot_key(task_id))


async def snapshot_load(*, user_id: int | str, task_id: str) -> Snapshot | None:
    """The stored snapshot, or None when there is none.

    Raises:
        openmates.crypto.DecryptionError: the user's key was replaced or deleted.
    """
    sealed = await redis_client().get(_snapshot_key(task_id))
    if sealed is None:
        return None
    plaintext = await crypto.aopen_sealed(
        key_name=vault.user_key_name(user_id),
        purpose=SNAPSHOT_PURPOSE,
        owner_id=user_id,
        object_id=task_id,
        sealed=_bytes(sealed),
    )
    raw = json.loads(plaintext)
    return Snapshot(
        chat_id=str(raw["chat_id"]),
        message_id=str(raw["message_id"]),
        sequence=int(raw["sequence"]),
        content=str(raw["content"]),
        status=raw.get("status"),
        model=str(raw.get("model") or ""),
        usage=raw.get("usage"),
        reason=raw.get("reason") or None,
    )


# For each counter i (KEYS[i]): create it at 0 for ARGV[2i] s unless it exists, count one
# event, and stop at the first over its limit ARGV[2i-1] (the counters after it are not
# counted: a refused frame is no turn). Returns that counter's 1-based index, else 0.
_RATE_LIMITS = """
for i, key in ipairs(KEYS) do
  redis.call('SET', key, 0, 'EX', ARGV[2 * i], 'NX')
  if redis.call('INCR', key) > tonumber(ARGV[2 * i - 1]) then return i end
end
return 0
"""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A fixed-window limit: at most ``limit`` events of ``kind`` per ``window_s`` seconds."""

    kind: str
    limit: int
    window_s: int


async def rate_limits_hit(*, user_id: int | str, limits: Sequence[RateLimit]) -> RateLimit | None:
    """Count one event against each of ``limits`` in order, in one round trip; return
    the first limit the user is now over (the later ones are then not counted), or None.

    Keys: ``om:rl:{uid}:{kind}:{window number}``, each living one window and a second.
    """
    if not limits:
        return None
    now = time.time()
    keys = [f"{PREFIX}rl:{user_id}:{lim.kind}:{int(now // lim.window_s)}" for lim in limits]
    args = [value for lim in limits for value in (lim.limit, lim.window_s + 1)]
    over = int(await redis_client().eval(_RATE_LIMITS, len(keys), *keys, *args))
    return limits[over - 1] if over else None


async def rate_limit_hit(*, user_id: int | str, kind: str, limit: int, window_s: int) -> bool:
    """Count one event of ``kind`` for the user; True when over ``limit`` per window."""
    hit = await rate_limits_hit(user_id=user_id, limits=[RateLimit(kind, limit, window_s)])
    return hit is not None


# --- per-chat pipeline state (sealed like the AI cache) -----------------------------------


async def _sealed_json_save(
    *, user_id: int | str, key: str, object_id: str, value: Any, ttl_s: int
) -> None:
    sealed = await crypto.aseal(
        key_name=vault.user_key_name(user_id),
        purpose=SNAPSHOT_PURPOSE,
        owner_id=user_id,
        object_id=object_id,
        plaintext=json.dumps(value, ensure_ascii=False).encode(),
    )
    await redis_client().set(key, sealed, ex=ttl_s)


async def _sealed_json_load(*, user_id: int | str, key: str, object_id: str) -> Any:
    sealed = await redis_client().get(key)
    if sealed is None:
        return None
    try:
        plaintext = await crypto.aopen_sealed(
            key_name=vault.user_key_name(user_id),
            purpose=SNAPSHOT_PURPOSE,
            owner_id=user_id,
            object_id=object_id,
            sealed=_bytes(sealed),
        )
    except crypto.DecryptionError:
        return None
    return json.loads(plaintext)


CHAT_META_TTL_S = 72 * 3600


@dataclass(frozen=True, slots=True)
class ChatNotes:
    """The pipeline's notes on a chat, sealed in Redis beside its AI cache.

    ``title``: the title the server made (heuristic, title call or post-processing);
    ``summary``: the rolling summary; ``summary_covers``: the id of the last message the
    summary covers (None: unknown, e.g. a summary the client sent); ``language``: the
    ISO 639 code of the last answered message. Change them with ``dataclasses.replace``.
    """

    title: str | None = None
    summary: str | None = None
    summary_covers: str | None = None
    language: str | None = None

    def to_json(self) -> dict[str, str]:
        """The stored form: ``{"title"?, "summary"?, "summary_covers"?, "language"?}``."""
        return {
            note.name: value
            for note in fields(self)
            if isinstance(value := getattr(self, note.name), str)
        }

    @classmethod
    def from_json(cls, raw: Any) -> ChatNotes:
        """The notes in ``raw`` (the stored form); anything else there is ignored."""
        if not isinstance(raw, dict):
            return cls()
        return cls(
            **{
                note.name: raw[note.name]
                for note in fields(cls)
                if isinstance(raw.get(note.name), str)
            }
        )


async def chat_notes_load(*, user_id: int | str, chat_id: str) -> ChatNotes:
    """The pipeline's notes on a chat (empty ones when there are none or they do not open)."""
    value = await _sealed_json_load(
        user_id=user_id, key=chat_cache.chat_notes_key(chat_id), object_id=f"{chat_id}:meta"
    )
    return ChatNotes.from_json(value)


async def chat_notes_save(*, user_id: int | str, chat_id: str, notes: ChatNotes) -> None:
    """Replace the pipeline's notes on a chat (sealed, 72 h like the AI cache)."""
    await _sealed_json_save(
        user_id=user_id,
        key=chat_cache.chat_notes_key(chat_id),
        object_id=f"{chat_id}:meta",
        value=notes.to_json(),
        ttl_s=CHAT_META_TTL_S,
    )


async def pending_content_save(*, user_id: int | str, message_id: str, content: str) -> None:
    """Keep an accepted user message's text (sealed) for retry, until it is answered
    (``pending_content_drop``) or its chat is deleted (``chats.cache.chat_forget``)."""
    await _sealed_json_save(
        user_id=user_id,
        key=chat_cache.pending_text_key(message_id),
        object_id=message_id,
        value={"content": content},
        ttl_s=CHAT_META_TTL_S,
    )


async def pending_content_load(*, user_id: int | str, message_id: str) -> str | None:
    """The kept text of a user message, or None when it is gone."""
    value = await _sealed_json_load(
        user_id=user_id, key=chat_cache.pending_text_key(message_id), object_id=message_id
    )
    return str(value["content"]) if isinstance(value, dict) and "content" in value else None


async def pending_content_drop(message_id: str) -> None:
    """Forget a user message's kept text (its turn is done)."""
    await redis_client().delete(chat_cache.pending_text_key(message_id))


HISTORY_REQUEST_TTL_S = 300


async def history_request_save(
    *, request_id: str, user_id: int | str, chat_id: str, task_id: str
) -> None:
    """Remember which turn waits for the ``chat.history`` answering ``request_id``."""
    await redis_client().set(
        f"{PREFIX}histreq:{request_id}",
        json.dumps({"user_id": str(user_id), "chat_id": chat_id, "task_id": task_id}),
        ex=HISTORY_REQUEST_TTL_S,
    )


async def history_request_get(request_id: str) -> dict[str, str] | None:
    """``{"user_id", "chat_id", "task_id"}`` of the turn waiting on ``request_id``, or None
    (left in place: :func:`history_request_pop` consumes it once the answer is checked)."""
    raw = await redis_client().get(f"{PREFIX}histreq:{request_id}")
    return json.loads(raw) if raw else None


async def history_request_pop(request_id: str) -> dict[str, str] | None:
    """The waiting turn of ``request_id`` (once), or None."""
    raw = await redis_client().getdel(f"{PREFIX}histreq:{request_id}")
    return json.loads(raw) if raw else None


def _consent_key(chat_id: str) -> str:
    # The key chats.cache evicts with the chat (docs/architecture.md §4).
    return f"chat:{chat_id}:memory_consent"


# A field of the consent hash: the durable answers were read into it.
_CONSENT_LOADED = "~stored"


async def memory_consent_get(chat_id: str) -> dict[str, str]:
    """Category → ``allowed`` | ``denied`` | ``asked`` for the chat: the Redis copy only
    (:func:`memory_consent_load` also reads the durable answers)."""
    raw = _decode(await redis_client().hgetall(_consent_key(chat_id)))
    raw.pop(_CONSENT_LOADED, None)
    return raw


async def memory_consent_load(chat_id: str) -> dict[str, str]:
    """The chat's consent, category → ``allowed`` | ``denied`` | ``asked``: the Redis
    copy, which caches the durable answers (``memories.models.MemoryConsent``).

    One Redis read while the copy holds them; after it expired or was evicted with the
    chat (docs/architecture.md §4) also one database read, and the answers go back into
    Redis (an answer there wins over an ``asked`` mark)."""
    key = _consent_key(chat_id)
    raw = _decode(await redis_client().hgetall(key))
    if raw.pop(_CONSENT_LOADED, None) is not None:
        return raw
    stored = await db_call(memory_selectors.memory_consent_for_chat, chat_id=chat_id)
    merged = {**raw, **stored}
    mapping: dict[Any, Any] = {**merged, _CONSENT_LOADED: "1"}
    async with redis_client().pipeline(transaction=True) as pipe:
        pipe.hset(key, mapping=mapping)
        pipe.expire(key, CHAT_META_TTL_S)
        await pipe.execute()
    return merged


async def memory_consent_answer(*, chat_id: str, user_id: int, answers: dict[str, str]) -> None:
    """Record the user's answers (category → ``allowed`` | ``denied``): durably first, then
    in the chat's Redis copy, so a copy that expires loses none of them."""
    if not answers:
        return
    await db_call(
        memory_services.memory_consent_save, chat_id=chat_id, user_id=user_id, answers=answers
    )
    await memory_consent_mark(chat_id, answers)


async def memory_consent_mark(chat_id: str, categories: dict[str, str]) -> None:
    """Record answers (or that the user was asked) per category; 72 h."""
    if not categories:
        return
    mapping: dict[Any, Any] = dict(categories)
    async with redis_client().pipeline(transaction=True) as pipe:
        pipe.hset(_consent_key(chat_id), mapping=mapping)
        pipe.expire(_consent_key(chat_id), CHAT_META_TTL_S)
        await pipe.execute()
