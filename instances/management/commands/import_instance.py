"""``manage.py import_instance FILE --owner USER [--overwrite] [--with-members]``.

An idempotent import of an ``export_instance`` document. Members are imported only with
``--with-members``: they grant roles to local users matched by username.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.transfer import instance_import


class Command(BaseCommand):
    help = "Import an instance configuration exported by export_instance; reports conflicts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="The JSON file ('-' for stdin is not supported).")
        parser.add_argument("--owner", required=True, help="Owner if the import creates it.")
        parser.add_argument(
            "--overwrite", action="store_true", help="Replace differing values (else kept)."
        )
        parser.add_argument(
            "--with-members",
            action="store_true",
            help="Also grant the file's member roles to local users with the same usernames "
            "(default: members are skipped and listed).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        owner = user_model.objects.filter(**{user_model.USERNAME_FIELD: options["owner"]}).first()
        if owner is None:
            raise CommandError(f"no user {options['owner']!r}")
        try:
            document = json.loads(Path(options["file"]).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise CommandError(f"cannot read {options['file']}: {exc}") from exc
        try:
            report = instance_import(
                document,
                owner=owner,
                overwrite=options["overwrite"],
                with_members=options["with_members"],
            )
        except ValidationError as exc:
            raise CommandError(f"{options['file']}: {'; '.join(exc.messages)}") from exc
        self.stdout.write(
            f"instance {report.instance}: {len(report.created)} created, "
            f"{len(report.updated)} updated, {len(report.unchanged)} unchanged, "
            f"{len(report.conflicts)} conflicts"
        )
        for conflict in report.conflicts:
            self.stdout.write(f"conflict: {conflict}")
