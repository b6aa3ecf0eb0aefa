"""Limits of ``/v1``: requests per minute and tokens per UTC day, per API key or user.

Counted in Redis, so every process shares them (docs/api.md §5):

* ``om:v1:rpm:{instance_id}:{subject}:{minute}``: requests in one fixed minute window
  (``minute`` = Unix time // 60), 120 s TTL;
* ``om:v1:tpd:{instance_id}:{yyyymmdd}``: a hash ``subject`` → tokens (prompt plus
  completion) used that UTC day, 48 h TTL; the analytics API reads it for "usage today".

``subject`` is ``key:{prefix}`` for an instance API key and ``user:{id}`` for a user's own
token. The limits are the instance's ``api_requests_per_minute`` / ``api_tokens_per_day``,
else ``settings.V1_REQUESTS_PER_MINUTE`` / ``settings.V1_TOKENS_PER_DAY``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings

from instances.models import Instance
from openmates import redis_client

PREFIX = "om:v1:"
TOKENS_TTL_S = 48 * 3600


@dataclass(frozen=True, slots=True)
class OverLimit:
    """A refused request: which limit (``requests_per_minute`` / ``tokens_per_day``) and
    how many whole seconds until it resets (``Retry-After``)."""

    limit: str
    retry_after_s: int


def limits_for(instance: Instance) -> tuple[int, int]:
    """``(requests per minute, tokens per day)`` for ``instance``."""
    rpm = instance.api_requests_per_minute or int(settings.V1_REQUESTS_PER_MINUTE)
    tpd = instance.api_tokens_per_day or int(settings.V1_TOKENS_PER_DAY)
    return rpm, tpd


def _day(now: datetime) -> str:
    return now.strftime("%Y%m%d")


def tokens_key(instance_id: int, day: str) -> str:
    """The Redis hash of one instance's token use on ``day`` (``yyyymmdd``, UTC)."""
    return f"{PREFIX}tpd:{instance_id}:{day}"


def _seconds_to_midnight(now: datetime) -> int:
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(1, int((midnight - now).total_seconds()) + 1)


async def acheck(*, instance: Instance, subject: str) -> OverLimit | None:
    """Count one request of ``subject`` and say whether it is over a limit (None: allowed).

    One round trip: the minute counter's SET NX + INCR and the day's token count.

    Raises:
        redis.RedisError: Redis is unreachable (the caller answers 503).
    """
    rpm, tpd = limits_for(instance)
    now_s = time.time()
    now = datetime.fromtimestamp(now_s, tz=UTC)
    window = int(now_s // 60)
    key = f"{PREFIX}rpm:{instance.pk}:{subject}:{window}"
    async with redis_client.async_client().pipeline(transaction=False) as pipe:
        pipe.set(key, 0, ex=120, nx=True)
        pipe.incr(key)
        pipe.hget(tokens_key(instance.pk, _day(now)), subject)
        _, count, used = await pipe.execute()
    if int(used or 0) >= tpd:
        return OverLimit("tokens_per_day", _seconds_to_midnight(now))
    if int(count) > rpm:
        return OverLimit("requests_per_minute", max(1, 60 - int(now_s % 60)))
    return None


async def atokens_add(*, instance_id: int, subject: str, tokens: int) -> None:
    """Add a finished request's tokens to ``subject``'s count of today (UTC)."""
    if tokens <= 0:
        return
    key = tokens_key(instance_id, _day(datetime.now(tz=UTC)))
    async with redis_client.async_client().pipeline(transaction=False) as pipe:
        pipe.hincrby(key, subject, tokens)
        pipe.expire(key, TOKENS_TTL_S)
        await pipe.execute()


def tokens_today(*, instance_id: int) -> dict[str, int]:
    """``{subject: tokens}`` used today (UTC) in ``instance_id`` (sync; for analytics)."""
    raw = redis_client.sync_client().hgetall(tokens_key(instance_id, _day(datetime.now(tz=UTC))))
    return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}
