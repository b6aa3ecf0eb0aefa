"""Reads for instances: membership checks and the cached prompt sections."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.db.models import QuerySet
from django_redis.exceptions import ConnectionInterrupted

from instances.models import Instance, InstanceMember, InstanceSecret, Mate, PromptSection

PROMPT_CACHE_TTL_S = 60
_CACHE_ERRORS = (ConnectionInterrupted, redis.RedisError, OSError)

logger = logging.getLogger(__name__)


def instance_get_for_user(*, slug: str, user: Any) -> Instance | None:
    """The instance ``slug`` if ``user`` is a member of it (any role), else ``None``.

    ``None`` also for anonymous users and unknown slugs, so "not yours" and "does not
    exist" look the same to a caller.
    """
    if not getattr(user, "is_authenticated", False):
        return None
    return Instance.objects.filter(slug=slug, members__user=user).first()


def instances_for_user(*, user: Any) -> QuerySet[Instance]:
    """Instances ``user`` is a member of (any role)."""
    if not getattr(user, "is_authenticated", False):
        return Instance.objects.none()
    return Instance.objects.filter(members__user=user).distinct()


def instances_administered_by(*, user: Any) -> QuerySet[Instance]:
    """Instances ``user`` may administer: every one for a superuser, else owner/admin roles."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return Instance.objects.none()
    if user.is_superuser:
        return Instance.objects.all()
    return Instance.objects.filter(
        members__user=user, members__role__in=InstanceMember.ADMIN_ROLES
    ).distinct()


def instance_role_for_user(*, instance: Instance, user: Any) -> str | None:
    """``user``'s role in ``instance`` ("owner", "admin", "member") or ``None``."""
    if not getattr(user, "is_authenticated", False):
        return None
    return (
        InstanceMember.objects.filter(instance=instance, user=user)
        .values_list("role", flat=True)
        .first()
    )


def user_can_administer(*, instance: Instance, user: Any) -> bool:
    """Whether ``user`` is a superuser or an owner/admin of ``instance``."""
    if getattr(user, "is_superuser", False) and user.is_active:
        return True
    return instance_role_for_user(instance=instance, user=user) in InstanceMember.ADMIN_ROLES


def prompt_cache_key(instance_id: int) -> str:
    """The cache key of an instance's prompt sections."""
    return f"instances:{instance_id}:prompt_sections"


def prompt_sections_get(instance: Instance) -> dict[str, str]:
    """The eight prompt sections of ``instance``, in section order, through a 60 s cache.

    Returns ``{"identity": "...", ..., "datetime": "..."}``; a section without a row is
    ``""``. The cache is dropped by the services that save sections. With Redis away the
    sections are read from the database (a prompt never fails for want of a cache).
    """
    key = prompt_cache_key(instance.pk)
    try:
        cached = cache.get(key)
    except _CACHE_ERRORS as exc:
        logger.warning("prompt cache unavailable (%s); reading the database", type(exc).__name__)
        cached = None
    if isinstance(cached, dict):
        return cached
    stored = dict(
        PromptSection.objects.filter(instance_id=instance.pk).values_list("key", "content")
    )
    sections = {k: stored.get(k, "") for k in PromptSection.Key.values}
    with contextlib.suppress(*_CACHE_ERRORS):
        cache.set(key, sections, timeout=PROMPT_CACHE_TTL_S)
    return sections


def prompt_cache_drop(instance_id: int) -> None:
    """Delete the cached sections now (Redis away: logged; the entry expires within 60 s)."""
    try:
        cache.delete(prompt_cache_key(instance_id))
    except _CACHE_ERRORS as exc:
        logger.warning("prompt cache not invalidated (%s)", type(exc).__name__)


def tier_secret_names(instance: Instance) -> set[str]:
    """Names of the secrets the instance's tier map refers to (set or not; no query)."""
    return {
        str(entry["secret"])
        for chain in (instance.tier_map or {}).values()
        if isinstance(chain, list)
        for entry in chain
        if isinstance(entry, dict) and entry.get("secret")
    }


def tier_secrets_missing(instance: Instance) -> list[str]:
    """Secret names the instance's tier map refers to that are not set, sorted."""
    return sorted(tier_secret_names(instance) - instance_secret_names(instance))


async def aprompt_sections_get(instance: Instance) -> dict[str, str]:
    """Async twin of ``prompt_sections_get``."""
    return await sync_to_async(prompt_sections_get)(instance)


def instance_secret_names(instance: Instance) -> set[str]:
    """Names of the secrets that are set for ``instance`` (never their values)."""
    return set(InstanceSecret.objects.filter(instance=instance).values_list("name", flat=True))


def mates_for_instance(instance: Instance) -> list[Mate]:
    """The instance's mates, the default one first."""
    return list(Mate.objects.filter(instance=instance).order_by("-is_default", "category", "name"))
