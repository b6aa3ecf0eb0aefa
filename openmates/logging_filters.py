"""Logging filters for ``settings.LOGGING``.

Django logs every request it refuses as suspicious (a body over the limit, a ``Host``
outside ``ALLOWED_HOSTS``, ...) to ``django.security.<ExceptionName>`` at ERROR with the
full traceback: some 90 lines that any anonymous client can have written per request.
"""

from __future__ import annotations

import logging


class SecurityWarning(logging.Filter):
    """Turn a ``django.security.*`` record into one WARNING line: level WARNING, no
    traceback. The refusal is expected behaviour; its message names what was refused."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place and let it through."""
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        record.levelno = logging.WARNING
        record.levelname = logging.getLevelName(logging.WARNING)
        return True
