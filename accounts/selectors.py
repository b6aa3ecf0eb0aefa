"""Reads for sign-up: which instance a new account would join, and whether it may."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from accounts.models import Invitation, SignupPolicy
from instances.models import Instance


def invitation_token_hash(token: str) -> str:
    """The stored form of an invitation token (hex SHA-256 of its UTF-8 text)."""
    return hashlib.sha256(token.encode()).hexdigest()


def default_instance_get() -> Instance | None:
    """The instance open sign-ups join: ``settings.DEFAULT_INSTANCE_SLUG``, else the oldest."""
    slug = settings.DEFAULT_INSTANCE_SLUG
    if slug:
        return Instance.objects.filter(slug=slug).first()
    return Instance.objects.order_by("pk").first()


def invitation_get_usable(*, token: str) -> Invitation | None:
    """The unused, unexpired invitation with this token, or None."""
    if not token:
        return None
    return (
        Invitation.objects.select_related("instance")
        .filter(
            token_hash=invitation_token_hash(token),
            used_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .first()
    )


@dataclass(frozen=True)
class SignupTarget:
    """Where a sign-up would land: ``instance`` None means sign-up is closed."""

    instance: Instance | None
    invitation: Invitation | None


def signup_target_get(*, invitation_token: str = "") -> SignupTarget:
    """The instance a new account joins given an (optional) invitation token.

    A usable invitation wins; otherwise the default instance when its policy is open;
    otherwise nothing (sign-up is by invitation only).
    """
    invitation = invitation_get_usable(token=invitation_token)
    if invitation is not None:
        return SignupTarget(instance=invitation.instance, invitation=invitation)
    instance = default_instance_get()
    if (
        instance is not None
        and SignupPolicy.objects.filter(instance=instance, open_signup=True).exists()
    ):
        return SignupTarget(instance=instance, invitation=None)
    return SignupTarget(instance=None, invitation=None)
