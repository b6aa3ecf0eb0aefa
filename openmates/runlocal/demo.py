"""The demo account of the embedded default: a user ``demo`` and an instance ``demo``.

``runlocal`` calls ``demo_setup`` (through ``manage.py createdemo``) on every start; it is
idempotent. The demo password is generated once into ``<data dir>/demo_password`` (0600)
and printed so the person who started the server can sign in.
"""

from __future__ import annotations

import importlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from chats import services as chat_services
from openmates.runlocal.supervisor import write_private

DEMO_USERNAME = "demo"
DEMO_INSTANCE_SLUG = "demo"
DEMO_INSTANCE_NAME = "Demo"
PASSWORD_FILE = "demo_password"  # noqa: S105 - a file name


@dataclass(frozen=True)
class DemoAccount:
    """What ``demo_setup`` found or made.

    ``password`` is None when the user existed before and its password file is gone
    (someone changed or set it by other means); ``instance_slug`` is None while the
    instances app cannot create instances yet.
    """

    username: str
    password: str | None
    user_created: bool
    instance_slug: str | None
    instance_created: bool


def _instance_create() -> Any | None:
    # The instances app provides instance_create; older trees without it get the user only.
    try:
        services = importlib.import_module("instances.services")
    except ImportError:
        return None
    return getattr(services, "instance_create", None)


def _demo_password(directory: Path, *, create: bool) -> str | None:
    path = directory / PASSWORD_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    if not create:
        return None
    password = secrets.token_urlsafe(12)
    write_private(path, password + "\n")
    return password


def demo_setup(*, directory: Path) -> DemoAccount:
    """Create the demo user (staff, so it can configure its instance) and the demo instance.

    Also ensures the demo user's Vault transit key ``user-<id>`` (on every call).

    Args:
        directory: the data directory holding ``demo_password``.

    Returns:
        A ``DemoAccount`` describing the sign-in.

    Raises:
        openmates.vault.VaultError: Vault refused or is unreachable (key creation).
    """
    user_model = get_user_model()
    user = user_model.objects.filter(username=DEMO_USERNAME).first()
    user_created = user is None
    password = _demo_password(directory, create=user_created)
    with transaction.atomic():
        if user is None:
            user = user_model.objects.create_user(
                username=DEMO_USERNAME,
                email="demo@localhost",
                password=password,
                is_staff=True,
            )
        instance_slug, instance_created = _ensure_instance(user)
    # Every turn seals under the user's transit key; a demo user made before this step
    # existed (or whose key was lost) gets it on the next start (idempotent).
    chat_services.user_transit_key_ensure(user_id=user.pk)
    return DemoAccount(
        username=DEMO_USERNAME,
        password=password,
        user_created=user_created,
        instance_slug=instance_slug,
        instance_created=instance_created,
    )


def _ensure_instance(user: Any) -> tuple[str | None, bool]:
    instance_create = _instance_create()
    if instance_create is None:
        return None, False
    from instances.models import Instance

    if Instance.objects.filter(slug=DEMO_INSTANCE_SLUG).exists():
        return DEMO_INSTANCE_SLUG, False
    instance_create(slug=DEMO_INSTANCE_SLUG, name=DEMO_INSTANCE_NAME, owner=user)
    return DEMO_INSTANCE_SLUG, True
