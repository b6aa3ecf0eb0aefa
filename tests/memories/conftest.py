"""Fixtures of the memories tests: instances (the local embedder, or scripted 4-dimensional
vectors at the LiteLLM boundary), members, and vectors built to a cosine similarity."""

from __future__ import annotations

import math
import secrets
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from instances.models import Instance, InstanceMember
from memories import services
from memories.models import Memory
from tests.factories import UserFactory

SCRIPTED_MODEL = "scripted/embed"


def unit(*values: float) -> list[float]:
    """``values`` scaled to length 1."""
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def at_similarity(base: list[float], other: list[float], similarity: float) -> list[float]:
    """A unit vector whose cosine similarity to unit ``base`` is exactly ``similarity``:
    ``similarity * base + sqrt(1 - similarity²) * w`` with ``w`` the unit part of
    ``other`` orthogonal to ``base``."""
    dot = sum(b * o for b, o in zip(base, other, strict=True))
    w = unit(*(o - dot * b for b, o in zip(base, other, strict=True)))
    rest = math.sqrt(1 - similarity * similarity)
    return [similarity * b + rest * x for b, x in zip(base, w, strict=True)]


def member(instance: Instance, username: str | None = None) -> Any:
    """A new user who is a member of ``instance``."""
    user: Any = UserFactory(username=username or f"m{secrets.token_hex(4)}")
    InstanceMember.objects.create(instance=instance, user=user, role="member")
    return user


@pytest.fixture
def local_instance(transactional_db: Any) -> Instance:
    """An instance on the packaged local embedder (384 dimensions)."""
    return Instance.objects.create(slug=f"mem-{secrets.token_hex(4)}", name="Memories")


@pytest.fixture
def scripted_instance(transactional_db: Any) -> Instance:
    """An instance whose embeddings are scripted per test (4 dimensions)."""
    return Instance.objects.create(
        slug=f"vec-{secrets.token_hex(4)}",
        name="Scripted vectors",
        embedding_model=SCRIPTED_MODEL,
        embedding_dimensions=4,
    )


@pytest.fixture
def alice(local_instance: Instance) -> Any:
    """A member of ``local_instance``."""
    return member(local_instance, "alice")


@pytest.fixture
def bob(local_instance: Instance) -> Any:
    """Another member of ``local_instance``."""
    return member(local_instance, "bob")


def remember(instance: Instance, user: Any, content: str, category: str = "fact") -> Memory:
    """Create a memory through the service (no dedup), as the REST API does."""
    return async_to_sync(services.amemory_create)(
        instance=instance, user_id=user.pk, category=category, content=content
    )


def upsert(
    instance: Instance, user: Any, content: str, category: str = "fact"
) -> services.MemoryWrite:
    """Store a fact through the dedup path."""
    return async_to_sync(services.amemory_upsert)(
        instance=instance, user_id=user.pk, category=category, content=content
    )
