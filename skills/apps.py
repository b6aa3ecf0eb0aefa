"""App config for ``skills``: loads the tool registry and joins the instance life cycle."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_tools_after_migrate(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    # Django's own way to run code after ``migrate`` (contenttypes and auth do the same):
    # the Tool rows follow the registry without a separate command.
    from django.db import connections

    from skills.services import tools_sync

    tables = connections[using].introspection.table_names()
    # ``migrate <other app>`` on a fresh database sends this too, before our tables exist.
    if {"skills_tool", "skills_instancetool", "instances_instance"} <= set(tables):
        tools_sync()


class SkillsConfig(AppConfig):
    """The ``skills`` app (see docs/architecture.md §2 for what it owns)."""

    name = "skills"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Import every tool module (duplicates fail here) and register the extension."""
        from instances.extensions import extension_register
        from skills.registry import load_tools
        from skills.services import SkillsInstanceExtension

        load_tools()
        extension_register(SkillsInstanceExtension())
        post_migrate.connect(_sync_tools_after_migrate, sender=self)
