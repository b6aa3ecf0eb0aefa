"""The interpreter's thread switch interval for a server process (Daphne).

A thread that wants CPython's GIL gets it when the holder blocks (on I/O, or in C code
that releases it) or, failing that, after the holder has run for the switch interval
(``sys.getswitchinterval()``, 5 ms by default; "sys.setswitchinterval" in the Python
documentation). A server process's event loop shares the GIL with the threads of its
Django calls (a database call returns to the loop through it) and with pre-processing's
embedding thread, whose multilingual model tokenizes in Python and runs many small
numpy steps: it holds the GIL for most of the ~5 ms a new message takes. With the
default, every hand-back to the loop while that thread ran could wait a whole interval,
and a turn's start makes several (the convoy effect D. Beazley described in
"Understanding the Python GIL", PyCon 2010). In ``bench/turn_overhead.py`` on a busy
2-core machine, ``pipeline_added_p50`` was 29.7-106.9 ms at 5 ms and 19.5-22.1 ms at
0.5 ms, runs alternating.
"""

from __future__ import annotations

import sys

from django.conf import settings


def apply() -> float:
    """Set the switch interval to ``settings.GIL_SWITCH_INTERVAL_MS``; return it in
    seconds, as the interpreter now reports it.

    Raises:
        ValueError: the setting is not a positive number of milliseconds.
    """
    milliseconds = float(settings.GIL_SWITCH_INTERVAL_MS)
    if not milliseconds > 0:
        raise ValueError(f"GIL_SWITCH_INTERVAL_MS must be positive, not {milliseconds!r}")
    sys.setswitchinterval(milliseconds / 1000)
    return sys.getswitchinterval()
