"""What PostgreSQL holds, as text, for canary scans: a plaintext that must never be stored
is searched for in every row of every table."""

from __future__ import annotations

from typing import Any

from django.db import connection

from chats import cache


def table_rows_text() -> list[str]:
    """Every row of every table of the test database as PostgreSQL prints it (``t::text``,
    what a dump holds), one string per row."""
    rows: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        for schema, table in cursor.fetchall():
            cursor.execute(f'SELECT t::text FROM "{schema}"."{table}" t')  # noqa: S608
            rows.extend(row[0] for row in cursor.fetchall())
    return rows


def redis_dump() -> bytes:
    """Every key name and value in the Redis database, whatever its type."""
    client: Any = cache.redis_client()
    chunks: list[bytes] = []
    for key in client.scan_iter(count=500):
        chunks.append(key)
        kind = client.type(key)
        if kind == b"string":
            chunks.append(client.get(key) or b"")
        elif kind == b"list":
            chunks.extend(client.lrange(key, 0, -1))
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                chunks += [field, value]
        elif kind == b"set":
            chunks.extend(client.smembers(key))
        elif kind == b"zset":
            chunks.extend(member for member, _ in client.zrange(key, 0, -1, withscores=True))
        elif kind == b"stream":
            for _, fields in client.xrange(key):
                for field, value in fields.items():
                    chunks += [field, value]
    return b"\n".join(chunks)
