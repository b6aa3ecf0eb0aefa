from __future__ import annotations

from django.apps import AppConfig, apps


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from accounts import signals

        user_model = get_user_model()
        post_save.connect(signals.user_saved, sender=user_model, dispatch_uid="accounts.saved")
        post_delete.connect(
            signals.user_deleted, sender=user_model, dispatch_uid="accounts.deleted"
        )
        # drf-spectacular finds extensions by import; it is optional until a schema is served.
        if apps.is_installed("drf_spectacular"):
            import accounts.schema  # noqa: F401
