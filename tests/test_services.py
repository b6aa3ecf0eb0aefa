"""The test session runs against real PostgreSQL (with pgvector) and Redis."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection


@pytest.mark.django_db
def test_database_has_pgvector() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    assert row is not None
    assert tuple(int(p) for p in row[0].split(".")[:2]) >= (0, 7)


def test_cache_round_trip_through_redis() -> None:
    cache.set("test:round-trip", {"a": 1}, timeout=30)
    assert cache.get("test:round-trip") == {"a": 1}
    assert cache.ttl("test:round-trip") <= 30  # type: ignore[attr-defined]
