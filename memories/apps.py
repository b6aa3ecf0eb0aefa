"""App config for ``memories``."""

from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    """The ``memories`` app (see docs/architecture.md §2 for what it owns)."""

    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"
