"""App config for ``memories``: joins account deletion (``accounts.deletion``)."""

from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    """The ``memories`` app (see docs/architecture.md §2 and §12 for what it owns)."""

    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the memories part of account deletion (its keys are shredded)."""
        from accounts.deletion import account_data_owner_register
        from memories.services import MemoriesAccountData

        account_data_owner_register(MemoriesAccountData())
