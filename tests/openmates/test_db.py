"""openmates.db.db_call: ORM work off the event loop that hands its connection back."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from openmates.db import db_call

pytestmark = pytest.mark.django_db(transaction=True)


def _count_users_and_keep_connection(seen: list[Any]) -> int:
    seen.append(connection)  # the calling thread's connection wrapper
    return User.objects.count()


async def test_db_call_returns_the_result_and_releases_the_connection() -> None:
    await db_call(User.objects.create_user, "pooled")
    seen: list[Any] = []
    assert await db_call(_count_users_and_keep_connection, seen) == 1
    # The executor thread no longer holds a connection: it went back to the pool.
    assert seen[0].connection is None


async def test_db_call_releases_the_connection_when_the_call_raises() -> None:
    seen: list[Any] = []

    def fail() -> None:
        _count_users_and_keep_connection(seen)
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        await db_call(fail)
    assert seen[0].connection is None


def test_connections_come_from_psycopg_pool() -> None:
    pool = settings.DATABASES["default"]["OPTIONS"]["pool"]
    assert pool["max_size"] >= pool["min_size"] >= 1
    assert getattr(connection, "pool", None) is not None  # psycopg's ConnectionPool
