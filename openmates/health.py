"""Liveness (``/health``) and readiness (``/health/ready``) of a server process.

Readiness probes the database (``SELECT 1`` and the pgvector extension), Redis
(``PING``), Vault (:func:`openmates.vault.health`) and the LLM gateway
(:func:`openmates.llm.health`) concurrently, each bounded by ``PROBE_TIMEOUT_S``, in a
thread pool of its own so a hung probe never occupies the event loop's default executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django_redis import get_redis_connection

from openmates import llm, vault

PROBE_TIMEOUT_S = 2.0

_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="health-probe")


def probe_database() -> dict[str, Any]:
    """``up`` when PostgreSQL answers ``SELECT 1`` and has the ``vector`` extension."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
    except Exception as exc:  # any driver failure means "down"
        return {"status": "down", "reason": f"{type(exc).__name__}: {exc}".strip()}
    finally:
        # Probes run in pool threads; never leave a connection open in one.
        connection.close()
    if row is None:
        return {"status": "down", "reason": "the pgvector extension is not installed"}
    return {"status": "up", "reason": None, "pgvector": str(row[0])}


def probe_redis() -> dict[str, Any]:
    """``up`` when Redis answers ``PING``."""
    try:
        answered = bool(get_redis_connection("default").ping())
    except Exception as exc:  # any client failure means "down"
        return {"status": "down", "reason": f"{type(exc).__name__}: {exc}".strip()}
    return {"status": "up", "reason": None} if answered else {"status": "down", "reason": "no PONG"}


def probe_vault() -> dict[str, Any]:
    """Vault reachable, unsealed, app token valid (:func:`openmates.vault.health`)."""
    return vault.health(timeout_s=PROBE_TIMEOUT_S)


def probe_llm() -> dict[str, Any]:
    """The LLM gateway's own readiness (:func:`openmates.llm.health`)."""
    return dict(llm.health())


PROBES: dict[str, Callable[[], dict[str, Any]]] = {
    "database": probe_database,
    "redis": probe_redis,
    "vault": probe_vault,
    "llm": probe_llm,
}


async def readiness_report(*, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run every probe concurrently; a probe without an answer in ``timeout_s`` is down.

    Returns ``{"status": "ready" | "not_ready", "components": {name: {"status": "up" |
    "starting" | "down", "reason": str | None, ...}}, "not_ready": [names]}``.
    """
    loop = asyncio.get_running_loop()
    futures = {name: loop.run_in_executor(_pool, probe) for name, probe in PROBES.items()}
    done, _ = await asyncio.wait(futures.values(), timeout=timeout_s)
    components: dict[str, dict[str, Any]] = {}
    for name, future in futures.items():
        if future in done and future.exception() is None:
            components[name] = future.result()
        elif future in done:
            error = future.exception()
            components[name] = {"status": "down", "reason": f"probe failed: {error!r}"}
        else:
            future.cancel()
            components[name] = {"status": "down", "reason": f"no answer within {timeout_s:g} s"}
    not_ready = [name for name, state in components.items() if state.get("status") != "up"]
    return {
        "status": "not_ready" if not_ready else "ready",
        "components": components,
        "not_ready": not_ready,
    }


async def liveness(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ok"}`` while the process serves requests."""
    return JsonResponse({"status": "ok"})


async def readiness(request: HttpRequest) -> JsonResponse:
    """200 when every component is up, else 503; the body names what is not ready."""
    report = await readiness_report()
    return JsonResponse(report, status=200 if report["status"] == "ready" else 503)
