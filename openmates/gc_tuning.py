"""Garbage-collector settings for a server process (Daphne).

A streamed answer allocates many short-lived objects per chunk (LiteLLM and the OpenAI
SDK build pydantic models for each), and LiteLLM keeps every chunk until the stream
ends. With CPython's default thresholds (700, 10, 10) that made the collector run
constantly, and each full collection walked every long-lived object of the process:
in ``bench/turn_overhead.py`` with 200 concurrent streams, 14 full collections of
100-270 ms each stalled every stream of the process (measured with ``gc.callbacks``).

:func:`apply` freezes what start-up created (Django, the URL and template machinery:
never garbage, now out of the collector's reach, still freed by reference counting) and
raises the thresholds so young collections are rarer and full ones rarer still. Cyclic
garbage then waits for up to ``threshold0`` allocations: a few MB at most. The
approach (freeze after start-up, larger thresholds) is the one CPython's ``gc.freeze``
documentation describes for pre-fork servers and Instagram's engineering blog reported
for Django ("Dismissing Python Garbage Collection at Instagram", 2017).
"""

from __future__ import annotations

import gc
import logging

from django.conf import settings

logger = logging.getLogger(__name__)


def apply() -> tuple[int, int, int]:
    """Freeze the start-up heap and set ``settings.GC_THRESHOLDS``; return the thresholds.

    A malformed ``GC_THRESHOLDS`` fails when settings load (``EnvError``), not here.
    """
    thresholds = tuple(settings.GC_THRESHOLDS)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    logger.debug("gc thresholds %s, %d objects frozen", thresholds, gc.get_freeze_count())
    return gc.get_threshold()
