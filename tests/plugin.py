"""Pytest plugin that gives the test session real services before Django loads.

Loaded with ``-p tests.plugin`` (pyproject ``addopts``). Its ``pytest_load_initial_conftests``
wrapper runs before pytest-django imports the settings, so it can point
``DATABASE_URL``/``REDIS_URL``/``VAULT_ADDR`` at the services it starts:

* PostgreSQL: ``DATABASE_URL`` when set, else an embedded PostgreSQL with pgvector in a
  temporary directory (removed at the end).
* Redis: ``REDIS_URL`` when set (the session uses database ``OPENMATES_TEST_REDIS_DB``,
  default 15, flushed before and after), else an embedded Redis.
* Vault: always a fresh ``bao server -dev`` on a free loopback port (see
  ``tests/vault_server.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

_cleanups: list[tuple[str, object]] = []


def _say(message: str) -> None:
    print(f"[test services] {message}", flush=True)


def _redis_url_with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = dict(parse_qsl(parts.query))
        query["db"] = str(db)
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{db}"))


def _flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def _start_services() -> None:
    # LiteLLM fetches its price map from the internet at import unless told otherwise; a
    # test module may import it before openmates.llm sets this.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    from openmates.runlocal.postgres import EmbeddedPostgres
    from openmates.runlocal.redis import EmbeddedRedis

    root = Path(tempfile.mkdtemp(prefix="openmates-test-"))
    _cleanups.append(("dir", root))
    if not os.environ.get("DATABASE_URL"):
        started = time.monotonic()
        pg = EmbeddedPostgres(root / "postgres")
        os.environ["DATABASE_URL"] = pg.start()
        _cleanups.append(("postgres", pg))
        _say(f"embedded PostgreSQL (pgvector) ready in {time.monotonic() - started:.1f} s")
    else:
        _say("using the PostgreSQL named by DATABASE_URL")
    if os.environ.get("REDIS_URL"):
        db = int(os.environ.get("OPENMATES_TEST_REDIS_DB", "15"))
        url = _redis_url_with_db(os.environ["REDIS_URL"], db)
        os.environ["REDIS_URL"] = url
        _flush_redis(url)
        _cleanups.append(("redis-db", url))
        _say(f"using the Redis named by REDIS_URL, database {db} (flushed)")
    else:
        redis_server = EmbeddedRedis(root / "redis", persistent=False)
        os.environ["REDIS_URL"] = redis_server.start()
        _cleanups.append(("redis", redis_server))
        _say("embedded Redis ready")
    from tests.vault_server import start_dev_vault

    os.environ.update(start_dev_vault(root / "openbao", _cleanups))
    # Anything the developer's shell or ./var/services.json would add is not for tests.
    os.environ["OPENMATES_DATA_DIR"] = str(root / "var")


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """Start the services, then let pytest-django import the settings."""
    if not getattr(early_config.option, "help", False):
        _start_services()
    return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop what the session started, in reverse order."""
    while _cleanups:
        kind, item = _cleanups.pop()
        if kind == "dir":
            shutil.rmtree(str(item), ignore_errors=True)
        elif kind == "redis-db":
            _flush_redis(str(item))
        else:
            item.destroy()  # type: ignore[attr-defined]
