"""Fixtures shared by every test module.

App-specific fixture modules are listed in ``pytest_plugins`` so each app's tests can
add fixtures without editing this file's body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from tests.channel_layer import fresh_channel_layer
from tests.factories import UserFactory

pytest_plugins: list[str] = [
    "tests.llm_fixtures",
    "tests.instances_fixtures",
    "tests.chats_fixtures",
    "tests.memories_fixtures",
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


@pytest.fixture(autouse=True)
def _channel_layer_per_test() -> Iterator[None]:
    """Each test receives through a channel-layer inbox of its own (tests/channel_layer.py)."""
    with fresh_channel_layer():
        yield


@pytest.fixture(autouse=True)
def _live_servers_quiet_before_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test with a live Daphne, wait for its turns and transactions to end before
    pytest-django flushes the database (tests/live_quiet.py)."""
    yield
    from tests.ui.conftest import LIVE_SERVERS

    marker = request.node.get_closest_marker("django_db")
    flushed = "transactional_db" in request.fixturenames or (
        marker is not None and bool(marker.kwargs.get("transaction"))
    )
    if LIVE_SERVERS and flushed:
        from tests.live_quiet import wait_quiet

        wait_quiet()
