"""App config for ``instances``."""

from __future__ import annotations

from django.apps import AppConfig


class InstancesConfig(AppConfig):
    """The ``instances`` app (see docs/architecture.md §2 for what it owns)."""

    name = "instances"
    default_auto_field = "django.db.models.BigAutoField"
