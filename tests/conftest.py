"""Fixtures shared by every test module.

App-specific fixture modules are listed in ``pytest_plugins`` so each app's tests can
add fixtures without editing this file's body.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from tests.factories import UserFactory

pytest_plugins: list[str] = [
    "tests.llm_fixtures",
    "tests.instances_fixtures",
    "tests.chats_fixtures",
]


@pytest.fixture
def owner(db: Any) -> Any:
    """A user who owns what a test creates."""
    return UserFactory(username="owner")


@pytest.fixture
def stranger(db: Any) -> Any:
    """A user with no access to the owner's data."""
    return UserFactory(username="stranger")


@pytest.fixture(autouse=True)
def _throttle_counters_reset() -> None:
    """Start each test without REST throttle counts (DRF keeps them in the Redis cache)."""
    delete_pattern: Any = getattr(cache, "delete_pattern")  # noqa: B009 (django-redis only)
    delete_pattern("throttle_*")
