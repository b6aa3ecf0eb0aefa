"""App config for ``pipeline``."""

from __future__ import annotations

from django.apps import AppConfig


class PipelineConfig(AppConfig):
    """The ``pipeline`` app (see docs/architecture.md §2 for what it owns)."""

    name = "pipeline"
    default_auto_field = "django.db.models.BigAutoField"
