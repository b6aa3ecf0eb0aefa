"""App config for ``chats``: joins account deletion (``accounts.deletion``)."""

from __future__ import annotations

from django.apps import AppConfig


class ChatsConfig(AppConfig):
    """The ``chats`` app (see docs/architecture.md §2 for what it owns)."""

    name = "chats"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the chats part of account deletion."""
        from accounts.deletion import account_data_owner_register
        from chats.services import ChatsAccountData

        account_data_owner_register(ChatsAccountData())
