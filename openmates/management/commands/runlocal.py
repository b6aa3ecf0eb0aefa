"""``manage.py runlocal``: OpenMates with its embedded services, on 127.0.0.1.

The work happens in ``openmates.runlocal.supervisor``, started here in its own session;
this process only forwards Ctrl-C / SIGTERM to it (as SIGTERM) and waits, so the
services stop in order instead of all at once on the terminal's signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openmates.runlocal.child import start_child


class Command(BaseCommand):
    """Start the embedded services and serve OpenMates until Ctrl-C."""

    help = (
        "Start PostgreSQL, Redis, OpenBao and the local model (each unless its env var is "
        "set), migrate, create the demo, and serve on http://127.0.0.1:8000/."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """--port and --no-model."""
        parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
        parser.add_argument(
            "--no-model", action="store_true", help="do not start the bundled local model"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the supervisor and wait for it; exit with its status."""
        port = int(options["port"])
        if not 0 < port < 65536:
            raise CommandError(f"--port {port} is not a TCP port")
        command = [
            sys.executable,
            "-m",
            "openmates.runlocal.supervisor",
            "--port",
            str(port),
            "--data-dir",
            str(settings.DATA_DIR),
        ]
        if options["no_model"]:
            command.append("--no-model")
        supervisor = start_child(command)
        code = self._wait(supervisor)
        if code:
            sys.exit(code)

    @staticmethod
    def _wait(supervisor: subprocess.Popen[bytes]) -> int:
        def forward(signum: int, frame: FrameType | None) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor.pid, signal.SIGTERM)

        signal.signal(signal.SIGINT, forward)
        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGHUP, forward)
        return supervisor.wait()
