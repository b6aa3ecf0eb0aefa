from __future__ import annotations

from django.apps import AppConfig, apps


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        # drf-spectacular finds extensions by import; it is optional until a schema is served.
        if apps.is_installed("drf_spectacular"):
            import accounts.schema  # noqa: F401
