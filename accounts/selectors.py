"""Reads for sign-up (which instance a new account would join, and whether it may) and
for API tokens (which user a presented token stands for)."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import ApiToken, Invitation, SignupPolicy
from instances.models import Instance

# ``om_<prefix>_<secret>``: 12 lowercase hex characters, then 43 URL-safe base64 characters
# (``secrets.token_urlsafe(32)``). The prefix has no "_", so the first two split the parts.
API_TOKEN_PATTERN = re.compile(r"om_(?P<prefix>[0-9a-f]{12})_[A-Za-z0-9_-]{43}")


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


def api_token_digest(raw: str) -> str:
    """The stored form of an API token: hex SHA-256 of its UTF-8 text (see ``ApiToken``)."""
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_prefix(raw: str) -> str | None:
    """The lookup prefix of a well-formed token (``om_<prefix>_<secret>``), else None."""
    match = API_TOKEN_PATTERN.fullmatch(raw)
    return match["prefix"] if match else None


def _usable_tokens(prefix: str) -> QuerySet[ApiToken]:
    # The user is loaded with the token: async callers must not follow a lazy relation.
    return ApiToken.objects.select_related("user").filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
        prefix=prefix,
        revoked_at__isnull=True,
        user__is_active=True,
    )


def _verified(token: ApiToken | None, raw: str) -> ApiToken | None:
    # Constant-time, so the response time says nothing about how much of a digest matched.
    if token is None or not hmac.compare_digest(token.digest, api_token_digest(raw)):
        return None
    return token


def api_token_get_usable(raw: str) -> ApiToken | None:
    """The token ``raw`` names, with its ``user`` loaded, or None.

    None when ``raw`` is malformed, unknown, does not match the stored digest, is revoked
    or expired, or its user is inactive.
    """
    prefix = api_token_prefix(raw)
    if prefix is None:
        return None
    return _verified(_usable_tokens(prefix).first(), raw)


def api_token_user(raw: str) -> User | None:
    """The active user a usable token ``raw`` stands for, else None (see above)."""
    token = api_token_get_usable(raw)
    return token.user if token is not None else None


def api_token_get_by_prefix(prefix: str) -> ApiToken | None:
    """The token with this lookup prefix (revoked or not), with its user, or None."""
    return ApiToken.objects.select_related("user").filter(prefix=prefix).first()


def api_tokens_for_user(*, user: User) -> QuerySet[ApiToken]:
    """The user's tokens, newest first, revoked ones included."""
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def api_token_creations_since(*, user: User, since: datetime) -> list[datetime]:
    """When the user's tokens made after ``since`` were created, oldest first (revoked too)."""
    return list(
        ApiToken.objects.filter(user=user, created_at__gt=since)
        .order_by("created_at")
        .values_list("created_at", flat=True)
    )


def api_tokens_active_count(*, user: User) -> int:
    """How many of the user's tokens are neither revoked nor expired now."""
    return ApiToken.objects.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
        user=user,
        revoked_at__isnull=True,
    ).count()


def api_token_get_for_user(*, user: User, prefix: str) -> ApiToken | None:
    """The user's token with this prefix, or None (also for another user's token)."""
    return ApiToken.objects.filter(user=user, prefix=prefix).first()


def invitation_problem(*, token: str) -> str | None:
    """Why an invitation token cannot be used, for people; None when it can (or is empty).

    ``"used"`` (an account was created with it), ``"expired"`` or ``"unknown"`` (no
    invitation has this token: mistyped, cut off, or its instance was deleted).
    """
    if not token:
        return None
    invitation = Invitation.objects.filter(token_hash=invitation_token_hash(token)).first()
    if invitation is None:
        return "unknown"
    if invitation.used_at is not None:
        return "used"
    if invitation.expires_at <= timezone.now():
        return "expired"
    return None


def signup_open() -> bool:
    """Whether the default instance takes new accounts without an invitation."""
    return signup_target_get().instance is not None
