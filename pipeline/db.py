"""Database calls of running turns.

Turns' own ORM calls go through :func:`openmates.db.db_call` (re-exported here): the
shared, bounded executor, with the connection released after each call, so 200 streaming
turns do not exhaust PostgreSQL's connections. Their Redis calls need no such limit: the
shared clients' pools wait for a free connection (``openmates.redis_client``).
"""

from __future__ import annotations

from openmates.db import db_call

__all__ = ["db_call"]
