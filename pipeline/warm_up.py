"""Loading the pre-processing models ahead of the first turn, once someone is about to
send one.

The language identifier (py3langid, about 75 MiB and 1 s of CPU) and the tools' example
vectors (onnxruntime with MiniLM, about 230 MiB and 3 s) are loaded in a background
thread when a server process first sees a chat socket open or a server-side turn start
(REST, ``/v1``, Telegram, Slack), not at start-up: an idle server stays within its
memory budget (docs/architecture.md §10), and a user who opens the app finds them loaded
by the time they have typed. A turn that comes first waits for the language identifier
(its lock) and picks tools without embeddings until the vectors are made.
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger(__name__)

THREAD_NAME = "models-warm-up"

_lock = threading.Lock()
_enabled = False
_thread: threading.Thread | None = None


def enable() -> None:
    """Let :func:`soon` start the warm-up (called in server processes only, so commands
    and tests load the models when they use them)."""
    global _enabled
    _enabled = True


def disable() -> None:
    """Undo :func:`enable` (tests)."""
    global _enabled, _thread
    with _lock:
        _enabled = False
        _thread = None


def soon() -> threading.Thread | None:
    """Start the warm-up thread unless it started already or warm-ups are not enabled.

    Cheap and idempotent: safe to call on every socket connect and every turn. Returns
    the thread (running or finished), or None when not enabled.
    """
    global _thread
    if not _enabled:
        return None
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, name=THREAD_NAME, daemon=True)
            _thread.start()
        return _thread


def _run() -> None:
    from pipeline import injection_model, preprocess

    try:
        preprocess.warm_up()
        injection_model.warm_up()
    except Exception:
        logger.exception("the pre-processing models could not be loaded ahead of time")
