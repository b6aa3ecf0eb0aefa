"""``manage.py restore SRC``: a backup into an empty data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from openmates.runlocal.backup import backup_restore
from openmates.runlocal.process import ServiceError


class Command(BaseCommand):
    """Restore a ``manage.py backup`` directory into an empty data directory."""

    help = (
        "Restore a backup made by `manage.py backup` into an empty data directory "
        "(default ./var); then start `manage.py runlocal` as usual."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        """SRC and --data-dir."""
        parser.add_argument("source", type=Path, help="the backup directory")
        parser.add_argument(
            "--data-dir", type=Path, default=None, help="the target (default ./var); must be empty"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the restore, printing each step."""
        directory = options["data_dir"] or settings.DATA_DIR
        try:
            backup_restore(source=options["source"], directory=directory, say=self.stdout.write)
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:
            # A destination (or source) that cannot be created or read: no traceback.
            where = f" {exc.filename}" if exc.filename else ""
            raise CommandError(f"restore failed:{where}: {exc.strerror or exc}") from exc
