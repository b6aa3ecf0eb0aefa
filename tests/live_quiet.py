"""Wait for the live Daphne servers of a test to stop touching the database.

A server's turn outlives the HTTP request that started it (post-processing: titles,
memories), so when a ``transaction=True`` test ends its flush (one ``TRUNCATE`` of every
table) can meet the server's open transaction and deadlock, leaving the rows for the
next test. The flush waits until no turn is running (``om:turns:running``, docs/architecture.md
§5) and no other session on the test database is inside a statement or transaction,
seen twice in a row.
"""

from __future__ import annotations

import time

from django.db import connection

from openmates.redis_client import sync_client
from pipeline import state

QUIET_WITHIN_S = 30.0
POLL_S = 0.1

_BUSY_SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND state IS NOT NULL AND state <> 'idle'"
)


def _busy() -> bool:
    if sync_client().scard(state._RUNNING_KEY):
        return True
    with connection.cursor() as cursor:
        cursor.execute(_BUSY_SESSIONS)
        (count,) = cursor.fetchone()
    return bool(count)


def wait_quiet(within_s: float = QUIET_WITHIN_S) -> bool:
    """Block until the live servers run no turn and hold no database transaction (two
    polls ``POLL_S`` apart) or ``within_s`` seconds passed; returns whether they did."""
    deadline = time.monotonic() + within_s
    quiet_polls = 0
    while time.monotonic() < deadline:
        quiet_polls = 0 if _busy() else quiet_polls + 1
        if quiet_polls >= 2:
            return True
        time.sleep(POLL_S)
    return False
