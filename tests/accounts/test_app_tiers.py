"""The chat page's tier picker learns from the app config which tiers a role may ask for."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from instances.models import InstanceMember
from instances.services import instance_create
from pipeline.preprocess import choose_tier
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _config(client: Client) -> dict[str, Any]:
    page = client.get("/").content.decode()
    found = re.search(r'id="app-config" type="application/json">(.*?)</script>', page)
    assert found is not None
    return dict(json.loads(found[1]))


@pytest.mark.parametrize(
    ("role", "granted"),
    [("member", ["fast", "standard"]), ("admin", ["fast", "standard", "heavy"])],
)
def test_pre_processing_grants_a_request_exactly_for_the_tiers_the_picker_offers(
    role: str, granted: list[str]
) -> None:
    assert list(InstanceMember.TIERS_BY_ROLE[role]) == granted
    for tier in ("fast", "standard", "heavy"):
        chosen, reason = choose_tier(
            "Hello there", previous_assistant=None, requested=tier, role=role
        )
        assert (reason == "requested by the client") == (tier in granted)
        if tier in granted:
            assert chosen == tier


def test_a_member_is_offered_fast_and_standard_and_an_owner_heavy_too(
    client: Client, owner: Any, settings: Any
) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "openai/small"}],
        "standard": [{"model": "openai/medium"}],
        "heavy": [{"model": "openai/large"}],
    }
    home = instance_create(slug="home", name="Home", owner=owner)
    member: Any = UserFactory(username="mia")
    InstanceMember.objects.create(instance=home, user=member, role=InstanceMember.Role.MEMBER)

    client.force_login(member)
    [seen_by_member] = _config(client)["instances"]
    client.force_login(owner)
    [seen_by_owner] = _config(client)["instances"]

    assert seen_by_member["tiers"] == [
        {"tier": "fast", "modelLabel": "small"},
        {"tier": "standard", "modelLabel": "medium"},
    ]
    assert seen_by_owner["tiers"] == [
        {"tier": "fast", "modelLabel": "small"},
        {"tier": "standard", "modelLabel": "medium"},
        {"tier": "heavy", "modelLabel": "large"},
    ]


def test_a_tier_without_a_model_is_not_offered(client: Client, owner: Any, settings: Any) -> None:
    settings.LLM_DEFAULT_TIERS = {"standard": [{"model": "openai/medium"}]}
    instance_create(slug="home", name="Home", owner=owner)

    client.force_login(owner)
    [seen] = _config(client)["instances"]

    assert seen["tiers"] == [{"tier": "standard", "modelLabel": "medium"}]
