"""Reads of memories. Every selector takes the (instance, user) pair and sees nothing else.

"Not yours" and "does not exist" look the same (``None``, an empty queryset). Rows come
without their embedding (large, and no reader needs it); decrypting is
:func:`memories_open`'s, and only for rows these selectors returned.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db.models import Count, QuerySet

from instances.models import Instance
from memories import keys
from memories.models import Memory, MemoryConsent, MemorySettings

# What a reader loads of a memory: everything but the vector and the blind index.
READ_FIELDS = (
    "id",
    "instance_id",
    "user_id",
    "category",
    "content_sealed",
    "source_chat_id",
    "created_at",
    "updated_at",
)


def memory_settings_get(*, instance_id: int, user_id: int) -> MemorySettings | None:
    """The user's memory settings in the instance, ``None`` before the first write."""
    return MemorySettings.objects.filter(instance_id=instance_id, user_id=user_id).first()


def memory_enabled(*, instance: Any, user_id: int | None) -> bool:
    """Whether memories are used for this user: the instance's switch and the user's."""
    if user_id is None or not instance.memory_enabled:
        return False
    found = memory_settings_get(instance_id=instance.pk, user_id=user_id)
    return found is None or found.enabled


def memory_instance_for_user(*, instance_id: int, user_id: int | None) -> Instance | None:
    """The instance, when it exists and memory is on in it for the user (else ``None``)."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or not memory_enabled(instance=instance, user_id=user_id):
        return None
    return instance


def current_key(*, instance_id: int, user_id: int) -> str | None:
    """The transit key the user's memories are sealed under now; ``None`` without any."""
    found = memory_settings_get(instance_id=instance_id, user_id=user_id)
    if found is None:
        return None
    return keys.key_name(instance_id=instance_id, user_id=user_id, generation=found.key_generation)


def memories_for_user(
    *, instance_id: int, user_id: int, category: str | None = None
) -> QuerySet[Memory]:
    """The user's memories in the instance (optionally one category), newest first."""
    rows = Memory.objects.filter(instance_id=instance_id, user_id=user_id)
    if category:
        rows = rows.filter(category=category)
    return rows.only(*READ_FIELDS).order_by("-created_at", "-id")


def memory_get_for_user(*, instance_id: int, user_id: int, memory_id: str) -> Memory | None:
    """One memory of the user in the instance, ``None`` for a malformed id or not theirs."""
    try:
        wanted = uuid.UUID(str(memory_id))
    except ValueError:
        return None
    return (
        Memory.objects.filter(pk=wanted, instance_id=instance_id, user_id=user_id)
        .only(*READ_FIELDS)
        .first()
    )


def memory_categories_for_user(*, instance_id: int, user_id: int) -> dict[str, int]:
    """How many memories the user has per category (categories without any are absent)."""
    rows = (
        Memory.objects.filter(instance_id=instance_id, user_id=user_id)
        .values("category")
        .annotate(count=Count("id"))
        .order_by()
    )
    return {row["category"]: row["count"] for row in rows}


def memory_categories_askable(*, instance: Any, user_id: int | None) -> dict[str, int]:
    """:func:`memory_categories_for_user` when memory is on for the user in ``instance``
    (its switch and theirs, :func:`memory_enabled`), else ``{}``: the categories a turn
    may ask consent for (docs/protocol.md §5, ``memory.request``). No query when the
    instance has memory off, one for a user who never had a memory (the settings row
    comes with the first), two otherwise."""
    if user_id is None or not instance.memory_enabled:
        return {}
    found = memory_settings_get(instance_id=instance.pk, user_id=user_id)
    if found is None or not found.enabled:
        return {}
    return memory_categories_for_user(instance_id=instance.pk, user_id=user_id)


def memory_consent_for_chat(*, chat_id: str, user_id: int | None = None) -> dict[str, str]:
    """The chat's stored consent answers (of ``user_id`` when given): category →
    ``allowed`` | ``denied`` (the durable copy, :class:`memories.models.MemoryConsent`);
    ``{}`` for an id that is not a UUID."""
    try:
        wanted = uuid.UUID(str(chat_id))
    except ValueError:
        return {}
    rows = MemoryConsent.objects.filter(chat_id=wanted)
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    pairs = rows.values_list("category", "decision")
    return {str(category): str(decision) for category, decision in pairs}


def memory_categories_consented(
    consent: Mapping[str, str], categories: Iterable[str], *, server_managed: bool
) -> list[str]:
    """Of ``categories`` (in order), those a chat's consent answers (category →
    ``allowed`` | ``denied`` | ``asked``) let the chat's turns read: the ``allowed`` ones;
    in a server-managed chat, which has no client to ask, every one not ``denied``. The
    one rule of the prompt's retrieval and the ``memory_search`` tool."""
    if server_managed:
        return [c for c in categories if consent.get(c) != "denied"]
    return [c for c in categories if consent.get(c) == "allowed"]


def memories_open(
    memories: Sequence[Memory], *, instance_id: int, user_id: int
) -> list[tuple[Memory, str]]:
    """Each memory with its decrypted text, in order (only the user's own rows).

    Raises:
        ValueError: a row of another instance or user was passed.
        openmates.crypto.DecryptionError: a row does not open (its key was shredded).
        openmates.vault.VaultError: a cold data key and Vault unusable.
    """
    key = current_key(instance_id=instance_id, user_id=user_id)
    opened: list[tuple[Memory, str]] = []
    for memory in memories:
        if memory.instance_id != instance_id or memory.user_id != user_id or key is None:
            raise ValueError("memories_open: a memory of another owner")
        text = keys.content_open(
            key=key, user_id=user_id, memory_id=str(memory.pk), sealed=bytes(memory.content_sealed)
        )
        opened.append((memory, text))
    return opened
