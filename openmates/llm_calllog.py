"""The AI call log: ``AICall`` rows written off the caller's path.

:mod:`openmates.llm` puts one row per attempt at a model call (ids, names, token counts,
latency, outcome, a failure's reason and :func:`sanitised_error_message`; never message
text) into a :class:`CallLogWriter`, whose daemon thread writes them in batches and prices
them. Prices come from a lookup the gateway passes in (LiteLLM's bundled price map), so
this module needs no LiteLLM of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

logger = logging.getLogger(__name__)

# US dollars per prompt token and per completion token of a model; None when unknown.
PriceLookup = Callable[[str], "tuple[float, float] | None"]

_MAX_BATCH = 500

# The longest error message kept on an AICall row (the column's width).
MAX_ERROR_MESSAGE_CHARS = 300
_REDACTED = "[redacted]"
# (shape, replacement): credentials in a provider's message.
_SECRET_SHAPES = (
    # An Authorization header's credentials.
    (re.compile(r"(?i)\b(bearer|basic)\s+[^\s\"',;]+"), r"\1 [redacted]"),
    # "api_key=…", "x-api-key: …", "token": "…" and the like.
    (
        re.compile(
            r"(?i)((?:api[-_ ]?key|access[-_ ]?token|token|secret|password|authorization)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"
        ),
        r"\1[redacted]",
    ),
    # Provider key shapes (sk-…, sk-ant-…, gsk_…, hf_…, AIza…, om_…), any long opaque run.
    (re.compile(r"\b(?:sk|pk|rk|gsk|hf|xai|om)[-_][A-Za-z0-9_-]{6,}"), _REDACTED),
    (re.compile(r"\bAIza[A-Za-z0-9_-]{20,}"), _REDACTED),
    (re.compile(r"[A-Za-z0-9+/_=-]{32,}"), _REDACTED),
)
# A provider may quote the request (a prompt, a tool argument) in its error: quoted runs
# and JSON bodies are dropped, whatever they hold.
_QUOTED = re.compile(
    r"\"(?!\[redacted\]\")[^\"]{8,}\"|'(?!\[redacted\]')[^']{8,}'|`[^`]{8,}`|«[^»]{8,}»|“[^”]{8,}”"
)
_JSON_BODY = re.compile(r"\{.*\}", re.DOTALL)


def sanitised_error_message(
    text: str, *, secrets: Iterable[str] = (), sent: Iterable[str] = ()
) -> str:
    """``text`` (a provider's error message) made fit for the AI call log and the admin.

    Each of ``secrets`` (the key the call used) becomes ``[redacted]``, and so does
    anything shaped like a credential (``Bearer …``, ``api_key=…``, ``sk-…``, a run of 32
    or more key characters); a run of :data:`QUOTE_MIN_CHARS` or more characters found in
    ``sent`` (what the call sent: message contents), quoted runs of 8 or more characters
    and ``{…}`` bodies, which may quote the prompt, become ``[text removed]``; whitespace
    is collapsed and the result cut to :data:`MAX_ERROR_MESSAGE_CHARS` characters.
    """
    text = text[: 4 * MAX_ERROR_MESSAGE_CHARS]
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, _REDACTED)
    text = _without_quotes_of(text, "\n".join(sent))
    for shape, replacement in _SECRET_SHAPES:
        text = shape.sub(replacement, text)
    text = _JSON_BODY.sub("[text removed]", text)
    text = _QUOTED.sub("[text removed]", text)
    text = " ".join(text.split())
    if len(text) > MAX_ERROR_MESSAGE_CHARS:
        text = text[: MAX_ERROR_MESSAGE_CHARS - 1] + "…"
    return text


# The shortest run of an error message that counts as quoting what was sent.
QUOTE_MIN_CHARS = 12


def _without_quotes_of(text: str, sent: str) -> str:
    """``text`` with every run of at least QUOTE_MIN_CHARS characters that occurs in
    ``sent`` replaced by ``[text removed]``.

    Windows of QUOTE_MIN_CHARS characters start every half window (so any quoted run of
    1.5 windows contains one); a window found in ``sent`` is widened a character at a time
    while the wider run still occurs there. ``text`` is at most a few hundred characters,
    so this is a few hundred ``str.find`` calls, on the error path only.
    """
    if len(sent) < QUOTE_MIN_CHARS or len(text) < QUOTE_MIN_CHARS:
        return text
    covered = [False] * len(text)
    step = QUOTE_MIN_CHARS // 2
    for start in range(0, len(text) - QUOTE_MIN_CHARS + 1, step):
        end = start + QUOTE_MIN_CHARS
        if covered[start] or text[start:end] not in sent:
            continue
        while start > 0 and text[start - 1 : end] in sent:
            start -= 1
        while end < len(text) and text[start : end + 1] in sent:
            end += 1
        covered[start:end] = [True] * (end - start)
    pieces: list[str] = []
    for index, char in enumerate(text):
        if not covered[index]:
            pieces.append(char)
        elif index == 0 or not covered[index - 1]:
            pieces.append("[text removed]")
    return "".join(pieces)


class CallLogWriter:
    """Writes AICall rows from a daemon thread, in batches, off the caller's path.

    A row is a dict of ``AICall`` fields without ``cost_usd`` (``model``,
    ``prompt_tokens`` and ``completion_tokens`` included); the writer adds the cost from
    ``price_per_token``. The thread closes its database connection whenever the queue
    runs empty, so no connection is held open between bursts. A batch that cannot be
    written is logged (a warning with its size) and dropped; the caller never sees it.
    Rows still queued when the process exits are written then (at most ``EXIT_FLUSH_S``).
    """

    # The writer gathers a second's rows into one INSERT: waking after each turn's calls
    # put its ORM work and its database round trip in the middle of the next turn's start.
    GATHER_S = 1.0
    EXIT_FLUSH_S = 5.0

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
                    atexit.register(self.flush, self.EXIT_FLUSH_S)
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
