"""``manage.py backup DEST``: a consistent copy of the embedded data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openmates.runlocal.backup import backup_create
from openmates.runlocal.process import ServiceError


class Command(BaseCommand):
    """Back up PostgreSQL, Redis and OpenBao of ./var (running or not) into DEST."""

    help = (
        "Write a consistent backup of the embedded data directory (database dump, Redis "
        "snapshot, OpenBao raft snapshot and unseal key) into DEST, a new directory."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        """DEST and --data-dir."""
        parser.add_argument("destination", type=Path, help="a new or empty directory")
        parser.add_argument(
            "--data-dir", type=Path, default=None, help="the data directory (default ./var)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the backup, printing each step."""
        directory = options["data_dir"] or settings.DATA_DIR
        try:
            backup_create(
                directory=directory, destination=options["destination"], say=self.stdout.write
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:
            # A destination (or source) that cannot be created or read: no traceback.
            where = f" {exc.filename}" if exc.filename else ""
            raise CommandError(f"backup failed:{where}: {exc.strerror or exc}") from exc
        self.stdout.write(
            "The backup holds the OpenBao unseal key and tokens: keep it as private as ./var."
        )
