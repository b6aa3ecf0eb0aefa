"""Fixtures for the account tests: an instance that takes open sign-ups, or not."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import SignupPolicy
from instances.models import Instance


@pytest.fixture
def default_instance(db: Any) -> Instance:
    """The default instance (the oldest one), taking invitations only."""
    return Instance.objects.create(slug="home", name="Home")


@pytest.fixture
def open_instance(default_instance: Instance) -> Instance:
    """The default instance with open sign-up."""
    SignupPolicy.objects.create(instance=default_instance, open_signup=True)
    return default_instance
