"""The demo account of the embedded default: a user ``demo`` and an instance ``demo``.

``runlocal`` runs ``manage.py createdemo`` (this app's command, by name) on every start,
which calls :func:`demo_setup`; it is idempotent. The demo password is generated once
into ``<data dir>/demo_password`` (0600) and printed so the person who started the server
can sign in.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import User
from django.db import transaction

from accounts.services import user_transit_key_ensure
from instances.models import Instance
from instances.services import instance_create
from openmates.runlocal.supervisor import write_private

DEMO_USERNAME = "demo"
DEMO_INSTANCE_SLUG = "demo"
DEMO_INSTANCE_NAME = "Demo"
PASSWORD_FILE = "demo_password"  # noqa: S105 - a file name


@dataclass(frozen=True)
class DemoAccount:
    """What ``demo_setup`` found or made.

    ``password`` is None when the user existed before and its password file is gone
    (someone changed or set it by other means).
    """

    username: str
    password: str | None
    user_created: bool
    instance_slug: str
    instance_created: bool


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
    user = User.objects.filter(username=DEMO_USERNAME).first()
    user_created = user is None
    password = _demo_password(directory, create=user_created)
    with transaction.atomic():
        if user is None:
            user = User.objects.create_user(
                username=DEMO_USERNAME,
                email="demo@localhost",
                password=password,
                is_staff=True,
            )
        instance_created = not Instance.objects.filter(slug=DEMO_INSTANCE_SLUG).exists()
        if instance_created:
            instance_create(slug=DEMO_INSTANCE_SLUG, name=DEMO_INSTANCE_NAME, owner=user)
    # Every turn seals under the user's transit key; a demo user whose key was lost gets
    # it again on the next start (idempotent).
    user_transit_key_ensure(user_id=user.pk)
    return DemoAccount(
        username=DEMO_USERNAME,
        password=password,
        user_created=user_created,
        instance_slug=DEMO_INSTANCE_SLUG,
        instance_created=instance_created,
    )
