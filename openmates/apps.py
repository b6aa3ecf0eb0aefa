"""App config for the project package: registers system checks and warms LiteLLM."""

from __future__ import annotations

import sys
from pathlib import Path

from django.apps import AppConfig

# Programs (or ``manage.py`` commands) that serve requests; only they warm up models.
_SERVERS = {"daphne", "uvicorn", "gunicorn", "hypercorn"}
_SERVING_COMMANDS = {"runserver"}


def serving() -> bool:
    """True in a process started to serve requests, not in ``migrate``, other commands or
    tests: the apps warm what the first request would otherwise wait for only then."""
    argv = sys.argv or [""]
    program = Path(argv[0])
    if _SERVERS & {program.name, program.parent.name}:  # `daphne …` or `python -m daphne …`
        return True
    return len(argv) > 1 and argv[1] in _SERVING_COMMANDS


class OpenMatesConfig(AppConfig):
    """Registers the production checks (``openmates.checks``) at start-up."""

    name = "openmates"
    verbose_name = "OpenMates"

    def ready(self) -> None:
        from openmates import checks  # noqa: F401  (registers the checks)

        if serving():
            # `import litellm` takes seconds: start it now, in a thread, so the first
            # request does not wait for it (health() says "starting" until it is done).
            from openmates import llm

            llm.start_background_import()
