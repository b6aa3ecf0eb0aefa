"""Instance API keys for ``/v1`` (``accounts.models.InstanceApiKey``; docs/api.md §4).

Creation makes the key's pseudo-user (``apikey:<prefix>``: a character the sign-up form
refuses, so no real account can take the name; an unusable password) and its transit
key, then returns the key once. Look-ups are by prefix and compare digests in constant
time. Revocation is immediate and idempotent.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import InstanceApiKey
from accounts.services import user_transit_key_ensure
from instances.models import Instance

KEY_PATTERN = re.compile(r"omk_(?P<prefix>[0-9a-f]{12})_[A-Za-z0-9_-]{43}")
NAME_MAX = 100
TOUCH_INTERVAL = timedelta(minutes=1)
PSEUDO_USER_PREFIX = "apikey:"


class InstanceKeyInvalidError(ValueError):
    """A name outside 1-100 characters or an expiry not in the future."""


def key_digest(raw: str) -> str:
    """Hex SHA-256 of the key's UTF-8 text (a 256-bit random secret needs no slow KDF)."""
    return hashlib.sha256(raw.encode()).hexdigest()


def is_instance_key(raw: str) -> bool:
    """Whether ``raw`` has the form of an instance key (``omk_…``), valid or not."""
    return raw.startswith("omk_")


def instance_key_create(
    *, instance: Instance, name: str, expires_at: datetime | None = None
) -> tuple[InstanceApiKey, str]:
    """Create a key of ``instance`` with its pseudo-user; returns the row and the key.

    Raises:
        InstanceKeyInvalidError: bad name or expiry (nothing is created).
        openmates.vault.VaultError: the pseudo-user's transit key cannot be made (nothing
            is created).
    """
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise InstanceKeyInvalidError(f"A key name is 1 to {NAME_MAX} characters.")
    if expires_at is not None and expires_at <= timezone.now():
        raise InstanceKeyInvalidError("A key's expiry must be in the future.")
    prefix = secrets.token_hex(6)
    raw = f"omk_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        user = User(username=f"{PSEUDO_USER_PREFIX}{prefix}", first_name=name[:150])
        user.set_unusable_password()
        user.save()
        key = InstanceApiKey.objects.create(
            instance=instance,
            user=user,
            name=name,
            prefix=prefix,
            digest=key_digest(raw),
            expires_at=expires_at,
        )
        user_transit_key_ensure(user_id=user.pk)
    return key, raw


def instance_key_get_usable(raw: str) -> InstanceApiKey | None:
    """The active key ``raw`` names (instance and user loaded), its use recorded; else None.

    None for a malformed, unknown, revoked or expired key or a digest that does not match.
    """
    match = KEY_PATTERN.fullmatch(raw)
    if match is None:
        return None
    now = timezone.now()
    key = (
        InstanceApiKey.objects.select_related("instance", "user")
        .filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            prefix=match["prefix"],
            revoked_at__isnull=True,
        )
        .first()
    )
    if key is None or not hmac.compare_digest(key.digest, key_digest(raw)):
        return None
    if key.last_used_at is None or now - key.last_used_at >= TOUCH_INTERVAL:
        InstanceApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def instance_key_get_by_prefix(prefix: str) -> InstanceApiKey | None:
    """The key with this prefix (revoked or not), with its instance, or None."""
    return InstanceApiKey.objects.select_related("instance").filter(prefix=prefix).first()


def instance_key_revoke(*, key: InstanceApiKey) -> InstanceApiKey:
    """Revoke ``key`` now (idempotent: the first revocation time is kept)."""
    InstanceApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    key.refresh_from_db(fields=["revoked_at"])
    return key
