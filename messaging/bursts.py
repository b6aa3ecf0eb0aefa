"""A person's messages waiting for their turn, shared by every server process in Redis.

docs/channels.md §5. Webhooks behind several processes deliver the messages of one burst
to whichever process the load balancer picks, so what waits is kept in Redis per *line*
(one person in one chat of a channel), and one process at a time, the line's leader,
takes it and runs the turn:

* ``om:channel:burst:{config id}:pending:{line}`` — the messages not taken yet (a list of
  JSON items, oldest first; each text sealed, docs/crypto.md §4);
* ``…:times:{line}`` — the Redis clock (ms) of the first and the last of them;
* ``…:taken:{line}`` — what the leader took and has not yet handed to a turn, so a
  leader that dies in between leaves it to the next;
* ``…:leader:{line}`` — the leader's token (``SET NX PX``, kept alive while it works);
* ``om:channel:bursts:{config id}`` — the lines with something waiting (the sweep's
  worklist);
* ``om:channel:seen:{config id}:{delivery id}`` — an update already queued (set by the
  append that queued it).

Every step is one Lua script, so an append and the leader's "nothing left: step down"
cannot interleave: a message is either seen by the leader or makes its sender the next
leader. The times come from Redis (``TIME``), so the processes' clocks do not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from openmates.redis_client import async_client

LEADER_LEASE_S = 10.0

_LINE_KEY = "om:channel:burst:{config_id}:{part}:{line}"
_INDEX_KEY = "om:channel:bursts:{config_id}"

# The Redis clock in milliseconds, as an integer string.
_NOW = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: pending, times, leader, index, seen. ARGV: item, token, ttl ms, lease ms, line,
# seen ttl ms. Returns -1 when the update was seen (nothing queued), 1 when the caller
# became the line's leader, else 0. Marking the update seen is part of the append, so an
# update is either queued and marked or neither.
_APPEND = (
    _NOW
    + """
if redis.call('SET', KEYS[5], '1', 'NX', 'PX', ARGV[6]) == false then return -1 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local now = string.format('%d', now_ms())
redis.call('HSET', KEYS[2], 'last', now)
redis.call('HSETNX', KEYS[2], 'first', now)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[5])
redis.call('PEXPIRE', KEYS[4], ARGV[3])
if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[4]) then return 1 end
return 0
"""
)

# KEYS: pending, times, leader, taken. ARGV: token, burst ms, max wait ms, ttl ms.
# {-1}: not the leader. {ms}: wait that long (the burst goes on). {0, items...}: the
# pending items moved behind what was already taken (a dead leader's first), all returned.
_TAKE = (
    _NOW
    + """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {-1} end
local times = redis.call('HMGET', KEYS[2], 'first', 'last')
if times[1] and times[2] then
  local due = math.min(tonumber(times[2]) + tonumber(ARGV[2]),
                       tonumber(times[1]) + tonumber(ARGV[3]))
  local wait = due - now_ms()
  if wait > 0 then return {wait} end
end
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('RPUSH', KEYS[4], item)
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
local out = {0}
for _, item in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do table.insert(out, item) end
return out
"""
)

# KEYS: leader, taken. ARGV: token. The taken items are in a turn now: forget them.
_SETTLE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
return 1
"""

# KEYS: leader, pending, taken, index. ARGV: token, line.
# -1: not the leader; 0: more waits (go on); 1: stepped down, the line is empty.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[4], ARGV[2])
return 1
"""

# KEYS: leader. ARGV: token, lease ms. 1 while the caller still leads.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS: leader. ARGV: token. Step down leaving the items (a stopping process).
_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: leader, pending, taken, index. ARGV: token, lease ms, line.
# 1: the line had items and no leader, the caller leads it now; 0: nothing to adopt
# (an empty line also leaves the index).
_ADOPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('SREM', KEYS[4], ARGV[3])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Line:
    """One person in one chat of channel ``config_id`` (``line``: ``<chat key>/<user>``)."""

    config_id: int
    line: str

    def key(self, part: str) -> str:
        """The Redis key of ``part`` (pending, times, taken, leader)."""
        return _LINE_KEY.format(config_id=self.config_id, part=part, line=self.line)

    @property
    def index(self) -> str:
        return _INDEX_KEY.format(config_id=self.config_id)


@dataclass(frozen=True)
class Taken:
    """What :func:`take` found: ``wait_s`` > 0 (the burst goes on), ``items`` (the
    batch, oldest first), or ``lost`` (another process leads the line now)."""

    wait_s: float = 0.0
    items: tuple[str, ...] = ()
    lost: bool = False


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


DUPLICATE, QUEUED, LEADING = -1, 0, 1


async def append(line: Line, item: str, *, token: str, ttl_s: float, seen_key: str) -> int:
    """Queue ``item`` (a JSON string) on ``line`` for ``ttl_s`` seconds and mark its
    update seen (``seen_key``, also ``ttl_s``), in one step. Returns :data:`DUPLICATE`
    (the update was seen already: nothing queued), :data:`LEADING` (the caller became the
    line's leader under ``token``, so it must run :func:`take` until the line is empty)
    or :data:`QUEUED`."""
    result = await async_client().eval(
        _APPEND,
        5,
        line.key("pending"),
        line.key("times"),
        line.key("leader"),
        line.index,
        seen_key,
        item,
        token,
        _ms(ttl_s),
        _ms(LEADER_LEASE_S),
        line.line,
        _ms(ttl_s),
    )
    return int(result)


async def take(line: Line, *, token: str, burst_s: float, max_wait_s: float, ttl_s: float) -> Taken:
    """The leader's batch once ``burst_s`` passed without a new message or ``max_wait_s``
    since the first (Redis clock); else how long to wait. The batch stays in Redis
    (``taken``) until :func:`settle`."""
    reply = await async_client().eval(
        _TAKE,
        4,
        line.key("pending"),
        line.key("times"),
        line.key("leader"),
        line.key("taken"),
        token,
        _ms(burst_s),
        _ms(max_wait_s),
        _ms(ttl_s),
    )
    head = int(reply[0])
    if head < 0:
        return Taken(lost=True)
    if head > 0:
        return Taken(wait_s=head / 1000)
    return Taken(items=tuple(_str(item) for item in reply[1:]))


async def settle(line: Line, *, token: str) -> None:
    """The taken batch is in a turn (or was given up): forget it."""
    await async_client().eval(_SETTLE, 2, line.key("leader"), line.key("taken"), token)


async def release(line: Line, *, token: str) -> bool:
    """Step down when nothing waits on ``line``; True when the leader is done (stepped
    down, or another process leads now), False when more waits (take again)."""
    result = await async_client().eval(
        _RELEASE,
        4,
        line.key("leader"),
        line.key("pending"),
        line.key("taken"),
        line.index,
        token,
        line.line,
    )
    return int(result) != 0


async def renew(line: Line, *, token: str) -> bool:
    """Keep leading ``line`` for another :data:`LEADER_LEASE_S`; False when lost."""
    result = await async_client().eval(_RENEW, 1, line.key("leader"), token, _ms(LEADER_LEASE_S))
    return bool(int(result))


async def resign(line: Line, *, token: str) -> None:
    """Stop leading ``line`` and leave what waits to the next leader or the sweep."""
    await async_client().eval(_RESIGN, 1, line.key("leader"), token)


async def adopt(line: Line, *, token: str) -> bool:
    """Lead ``line`` when something waits there and no one leads it (its leader died);
    True when the caller leads it now."""
    result = await async_client().eval(
        _ADOPT,
        4,
        line.key("leader"),
        line.key("pending"),
        line.key("taken"),
        line.index,
        token,
        _ms(LEADER_LEASE_S),
        line.line,
    )
    return bool(int(result))


async def lines_waiting(config_id: int) -> list[Line]:
    """The lines of the channel with something waiting (or not yet cleaned up)."""
    members = await async_client().smembers(_INDEX_KEY.format(config_id=config_id))
    return [Line(config_id=config_id, line=_str(member)) for member in sorted(members)]
