"""App config for ``memories``: joins account and instance deletion (``accounts.deletion``,
``instances.extensions``)."""

from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    """The ``memories`` app (see docs/architecture.md §2 and §12 for what it owns)."""

    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the memories part of account and instance deletion (their memory keys
        are shredded)."""
        from accounts.deletion import account_data_owner_register
        from instances.extensions import instance_data_owner_register
        from memories.services import MemoriesAccountData, MemoriesInstanceData

        account_data_owner_register(MemoriesAccountData())
        instance_data_owner_register(MemoriesInstanceData())
