"""System checks: production mode (``DEBUG=False``) refuses to start without its essentials.

Registered without the ``deploy`` flag, so ``runserver``/``daphne`` start-up,
``manage.py check`` and ``manage.py check --deploy`` all run them. Ids are stable:

* ``openmates.E001`` ``SECRET_KEY`` missing or the development default
* ``openmates.E002`` no ``DATABASE_URL``
* ``openmates.E003`` no ``VAULT_ADDR``
* ``openmates.E004`` no Vault credentials (``VAULT_TOKEN`` or AppRole role and secret id)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register


@register(Tags.security)
def check_production_settings(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Errors for every required production setting that is missing (none under DEBUG)."""
    if settings.DEBUG:
        return []
    errors: list[CheckMessage] = []
    secret = getattr(settings, "SECRET_KEY", "")
    if not secret or secret == settings.DEFAULT_SECRET_KEY:
        errors.append(
            Error(
                "SECRET_KEY is missing or still the development default.",
                hint="Set SECRET_KEY (or SECRET_KEY_FILE) to a long random value.",
                id="openmates.E001",
            )
        )
    if not getattr(settings, "DATABASE_URL", ""):
        errors.append(
            Error(
                "DATABASE_URL is not set.",
                hint="Point DATABASE_URL at PostgreSQL with pgvector, e.g. "
                "postgres://user:password@host:5432/openmates.",
                id="openmates.E002",
            )
        )
    if not getattr(settings, "VAULT_ADDR", ""):
        errors.append(
            Error(
                "VAULT_ADDR is not set.",
                hint="Point VAULT_ADDR at Vault or OpenBao with the transit engine.",
                id="openmates.E003",
            )
        )
    has_token = bool(getattr(settings, "VAULT_TOKEN", ""))
    has_approle = bool(getattr(settings, "VAULT_ROLE_ID", "")) and bool(
        getattr(settings, "VAULT_SECRET_ID", "")
    )
    if not (has_token or has_approle):
        errors.append(
            Error(
                "No Vault credentials: neither VAULT_TOKEN nor VAULT_ROLE_ID and "
                "VAULT_SECRET_ID are set.",
                hint="Give the app token (transit use only) or an AppRole login.",
                id="openmates.E004",
            )
        )
    return errors
