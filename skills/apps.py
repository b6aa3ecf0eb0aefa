"""App config for ``skills``."""

from __future__ import annotations

from django.apps import AppConfig


class SkillsConfig(AppConfig):
    """The ``skills`` app (see DESIGN.md §2 for what it owns)."""

    name = "skills"
    default_auto_field = "django.db.models.BigAutoField"
