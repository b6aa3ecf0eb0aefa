"""The wait before a live-server test's flush (tests/live_quiet.py) sees the server's work."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection

from openmates.redis_client import sync_client
from pipeline import state
from tests.live_quiet import wait_quiet

pytestmark = pytest.mark.django_db(transaction=True)


def _other_session() -> Any:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params)


def test_an_open_transaction_of_another_session_keeps_it_waiting() -> None:
    assert wait_quiet(within_s=5)
    other = _other_session()
    try:
        other.execute("SELECT 1")  # psycopg opened a transaction: 'idle in transaction'
        assert not wait_quiet(within_s=0.5)
        other.commit()
        assert wait_quiet(within_s=5)
    finally:
        other.close()


def test_a_running_turn_keeps_it_waiting() -> None:
    sync_client().sadd(state._RUNNING_KEY, "task-of-a-live-server")
    try:
        assert not wait_quiet(within_s=0.5)
    finally:
        sync_client().srem(state._RUNNING_KEY, "task-of-a-live-server")
    assert wait_quiet(within_s=5)
