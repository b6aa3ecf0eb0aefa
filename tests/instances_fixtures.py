"""Fixtures for instances and skills: an instance created through the real service."""

from __future__ import annotations

from typing import Any

import pytest

from instances.services import instance_create
from skills.services import skill_catalog_seed


@pytest.fixture
def skill_catalog(db: Any) -> None:
    """The built-in skill catalog (a flushing transactional test elsewhere may have wiped the
    rows its data migration made)."""
    skill_catalog_seed()


@pytest.fixture
def instance(owner: Any, skill_catalog: None) -> Any:
    """An instance ``demo`` owned by ``owner``, with default prompts, mate, skills, transit key."""
    return instance_create(slug="demo", name="Demo", owner=owner)


@pytest.fixture
def other_instance(stranger: Any, skill_catalog: None) -> Any:
    """A second instance ``other``, owned by ``stranger``."""
    return instance_create(slug="other", name="Other", owner=stranger)
