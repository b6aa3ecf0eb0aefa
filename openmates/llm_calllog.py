"""The AI call log: ``AICall`` rows written off the caller's path.

:mod:`openmates.llm` puts one row per attempt at a model call (ids, names, token counts,
latency, outcome; never text) into a :class:`CallLogWriter`, whose daemon thread writes
them in batches and prices them. Prices come from a lookup the gateway passes in (LiteLLM's
bundled price map), so this module needs no LiteLLM of its own.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

logger = logging.getLogger(__name__)

# US dollars per prompt token and per completion token of a model; None when unknown.
PriceLookup = Callable[[str], "tuple[float, float] | None"]

_MAX_BATCH = 500


class CallLogWriter:
    """Writes AICall rows from a daemon thread, in batches, off the caller's path.

    A row is a dict of ``AICall`` fields without ``cost_usd`` (``model``,
    ``prompt_tokens`` and ``completion_tokens`` included); the writer adds the cost from
    ``price_per_token``. The thread closes its database connection whenever the queue
    runs empty, so no connection is held open between bursts. A batch that cannot be
    written is logged (a warning with its size) and dropped; the caller never sees it.
    """

    GATHER_S = 0.05

    def __init__(self, *, price_per_token: PriceLookup) -> None:
        self._price_per_token = price_per_token
        self._prices: dict[str, tuple[float, float] | None] = {}
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._flush_requested = threading.Event()

    def put(self, row: dict[str, Any]) -> None:
        """Queue ``row`` (never blocks; starts the writer thread on first use)."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="ai-call-log", daemon=True
                    )
                    self._thread.start()
        self._queue.put_nowait(row)

    def pending(self) -> int:
        """Rows queued or being written."""
        return self._queue.unfinished_tasks

    async def aflush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued row is written; False if ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while self.pending():
            self._flush_requested.set()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Blocking twin of :meth:`aflush` (for tests and shutdown)."""
        deadline = time.monotonic() + timeout_s
        while self.pending():
            self._flush_requested.set()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def cost_usd(self, model: str, prompt_tokens: int, completion_tokens: int) -> Decimal:
        """Cost of one call in US dollars; 0 for models the price lookup does not know.

        Per-token prices are looked up once per model (LiteLLM's lookup costs a few
        hundred microseconds, and this runs for every call).
        """
        if not (prompt_tokens or completion_tokens):
            return Decimal(0)
        if model not in self._prices:
            self._prices[model] = self._price_per_token(model)
        price = self._prices[model]
        if price is None:
            return Decimal(0)
        return Decimal(str(round(prompt_tokens * price[0] + completion_tokens * price[1], 8)))

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            # Rows come in bursts (a turn makes several calls): gather them into one
            # INSERT instead of waking up, and taking the GIL, once per call.
            self._flush_requested.wait(self.GATHER_S)
            self._flush_requested.clear()
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(batch)
            except Exception as exc:
                logger.warning(
                    "AI call log: %d rows not written (%s)", len(batch), type(exc).__name__
                )
            finally:
                for _ in batch:
                    self._queue.task_done()
            if self._queue.empty():
                self._close_connection()

    def _write(self, batch: list[dict[str, Any]]) -> None:
        # Imported when the first batch is written: the gateway (and so this module) may
        # be imported before Django's app registry is ready.
        from openmates.models import AICall

        rows = []
        for row in batch:
            cost = self.cost_usd(row["model"], row["prompt_tokens"], row["completion_tokens"])
            rows.append(AICall(cost_usd=cost, **row))
        AICall.objects.bulk_create(rows)

    @staticmethod
    def _close_connection() -> None:
        from django.db import connection

        try:
            connection.close()
        except Exception as exc:
            logger.warning("AI call log: closing the connection failed (%s)", type(exc).__name__)
