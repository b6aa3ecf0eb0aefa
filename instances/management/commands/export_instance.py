"""``manage.py export_instance SLUG [-o FILE]``: the configuration as JSON, without secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.models import Instance
from instances.transfer import instance_export


class Command(BaseCommand):
    help = "Export an instance's configuration as JSON (secret values are never exported)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("-o", "--output", help="Write to this file instead of stdout.")

    def handle(self, *args: Any, **options: Any) -> None:
        instance = Instance.objects.filter(slug=options["slug"]).first()
        if instance is None:
            raise CommandError(f"no instance {options['slug']!r}")
        text = json.dumps(instance_export(instance), indent=2, ensure_ascii=False) + "\n"
        if options["output"]:
            try:
                Path(options["output"]).write_text(text, encoding="utf-8")
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise CommandError(f"cannot write {options['output']}: {reason}") from exc
            self.stderr.write(f"exported {instance.slug} to {options['output']}")
        else:
            self.stdout.write(text, ending="")
