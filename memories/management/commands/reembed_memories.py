"""``manage.py reembed_memories --instance SLUG``: re-embed after an embedding model change."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.models import Instance
from memories.reembed import memories_reembed
from memories.vectors import VectorError
from openmates import llm, vault


class Command(BaseCommand):
    help = (
        "Re-embed an instance's memories with its current embedding model and dimension "
        "(resumable: run it again after an interruption; progress is printed per batch)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--instance", required=True, help="the instance's slug")
        parser.add_argument("--batch-size", type=int, default=64, help="memories per batch")

    def handle(self, *args: Any, **options: Any) -> None:
        instance = Instance.objects.filter(slug=options["instance"]).first()
        if instance is None:
            raise CommandError(f"no instance {options['instance']!r}")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size is at least 1")
        try:
            report = memories_reembed(
                instance=instance, batch_size=options["batch_size"], progress=self.stdout.write
            )
        except (llm.LLMError, VectorError, vault.VaultError) as exc:
            raise CommandError(f"re-embedding stopped (run it again to go on): {exc}") from exc
        dropped = ", ".join(str(d) for d in report.indexes_dropped) or "none"
        self.stdout.write(
            f"done: {report.done} re-embedded, {report.failed} would not open; "
            f"index for {report.dims} dimensions; old indexes dropped: {dropped}"
        )
