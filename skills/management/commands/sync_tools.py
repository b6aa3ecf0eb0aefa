"""``manage.py sync_tools``: Tool rows follow the code registry (also run after migrate)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from skills.services import tools_sync


class Command(BaseCommand):
    help = "Sync Tool rows from the registry and recompute every instance's tools."

    def handle(self, *args: Any, **options: Any) -> None:
        counts = tools_sync()
        self.stdout.write(
            f"tools: {counts['created']} created, {counts['updated']} updated, "
            f"{counts['unavailable']} no longer registered"
        )
