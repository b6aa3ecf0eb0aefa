"""App config for ``pipeline``: warms the language model in server processes."""

from __future__ import annotations

import logging
import threading

from django.apps import AppConfig

logger = logging.getLogger(__name__)


def _warm_up() -> None:
    from pipeline import preprocess

    try:
        preprocess.warm_up()
    except Exception:
        logger.exception("the language identifier could not be loaded ahead of time")


class PipelineConfig(AppConfig):
    """The ``pipeline`` app (see docs/architecture.md §2 for what it owns)."""

    name = "pipeline"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """In a server process, load the language identifier (~0.5 s) in a thread, so the
        first message does not wait for it; commands and tests do not load it here."""
        from openmates.apps import serving

        if serving():
            threading.Thread(target=_warm_up, name="langid-warm-up", daemon=True).start()
