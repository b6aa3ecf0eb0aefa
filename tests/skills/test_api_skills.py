"""The REST API under /api/skills/ (skills.api): the catalog, an instance's skills and
tools for its members, enabling and disabling for owners and admins only."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance, InstanceMember
from skills.catalog import CATALOG
from skills.models import InstanceSkill, InstanceTool
from tests.chats.rest import signed_in_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_catalog_lists_skills_with_their_latest_version(
    skill_catalog: None, owner: Any
) -> None:
    body = signed_in_client(owner).get("/api/skills/", {"page_size": 200}).json()

    by_slug = {s["slug"]: s for s in body["results"]}
    assert set(by_slug) == {entry["slug"] for entry in CATALOG}
    for entry in CATALOG:
        assert by_slug[entry["slug"]]["latest"]["version"] == 1
        assert by_slug[entry["slug"]]["latest"]["tool_names"] == entry["tool_names"]


def test_members_read_an_instances_skills_and_strangers_get_404(
    instance: Instance, stranger: Any
) -> None:
    member: Any = UserFactory()
    InstanceMember.objects.create(instance=instance, user=member, role="member")

    mine = signed_in_client(member).get("/api/skills/instances/demo/")
    theirs = signed_in_client(stranger).get("/api/skills/instances/demo/")

    assert mine.status_code == 200
    enabled = {s["skill"] for s in mine.json()["skills"] if s["enabled"]}
    assert enabled == set(
        InstanceSkill.objects.filter(instance=instance, enabled=True).values_list(
            "skill__slug", flat=True
        )
    )
    assert {t["name"] for t in mine.json()["tools"]} == set(
        InstanceTool.objects.filter(instance=instance).values_list("name", flat=True)
    )
    assert theirs.status_code == 404
    assert theirs.json()["code"] == "not_found"


def test_the_owner_disables_and_enables_a_skill_and_its_tools_follow(
    instance: Instance, owner: Any
) -> None:
    client = signed_in_client(owner)
    row = InstanceSkill.objects.filter(instance=instance, enabled=True).select_related("skill")[0]
    slug, tools = row.skill.slug, row.version.tool_names

    off = client.put(f"/api/skills/instances/demo/{slug}/", {"enabled": False}, format="json")
    tools_off = set(
        InstanceTool.objects.filter(instance=instance, name__in=tools, enabled=True).values_list(
            "name", flat=True
        )
    )
    on = client.put(
        f"/api/skills/instances/demo/{slug}/", {"enabled": True, "version": 1}, format="json"
    )

    assert off.status_code == 200, off.content
    assert {s["skill"]: s["enabled"] for s in off.json()["skills"]}[slug] is False
    assert tools_off == set()
    assert {s["skill"]: s["enabled"] for s in on.json()["skills"]}[slug] is True
    assert InstanceSkill.objects.get(instance=instance, skill=row.skill).enabled is True


def test_a_member_cannot_change_skills_and_bad_bodies_are_refused(
    instance: Instance, owner: Any
) -> None:
    member: Any = UserFactory()
    InstanceMember.objects.create(instance=instance, user=member, role="member")
    slug = InstanceSkill.objects.filter(instance=instance)[0].skill.slug

    forbidden = signed_in_client(member).put(
        f"/api/skills/instances/demo/{slug}/", {"enabled": False}, format="json"
    )
    client = signed_in_client(owner)
    string_bool = client.put(
        f"/api/skills/instances/demo/{slug}/", {"enabled": "no"}, format="json"
    )
    bad_version = client.put(
        f"/api/skills/instances/demo/{slug}/", {"enabled": True, "version": 99}, format="json"
    )
    unknown = client.put("/api/skills/instances/demo/nope/", {"enabled": True}, format="json")

    assert forbidden.status_code == 403
    assert string_bool.status_code == 400
    assert list(string_bool.json()["fields"]) == ["enabled"]
    assert bad_version.json()["fields"] == {"version": ["no such version of this skill"]}
    assert unknown.status_code == 404
    assert InstanceSkill.objects.filter(instance=instance, enabled=True).count() >= 1
