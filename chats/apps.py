"""App config for ``chats``."""

from __future__ import annotations

from django.apps import AppConfig


class ChatsConfig(AppConfig):
    """The ``chats`` app (see DESIGN.md §2 for what it owns)."""

    name = "chats"
    default_auto_field = "django.db.models.BigAutoField"
