"""The REST API under /api/instances/ (instances.api): scoped to members (404 otherwise),
configuration and writes for owners and admins (403 for members), write-only secrets."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from instances.models import Instance, InstanceMember, InstanceSecret, Mate, PromptSection
from instances.services import instance_secret_get
from tests.chats.rest import signed_in_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _member(instance: Instance, role: str = "member") -> Any:
    user: Any = UserFactory()
    InstanceMember.objects.create(instance=instance, user=user, role=role)
    return user


def test_a_user_lists_only_their_instances_with_their_role(
    instance: Instance, other_instance: Instance, owner: Any
) -> None:
    third = Instance.objects.create(slug="third", name="Third")
    InstanceMember.objects.create(instance=third, user=owner, role="member")

    body = signed_in_client(owner).get("/api/instances/").json()

    assert [(i["slug"], i["role"]) for i in body["results"]] == [
        ("third", "member"),
        ("demo", "owner"),
    ]
    assert "tier_map" not in body["results"][0]


def test_an_instance_of_someone_else_is_not_found_as_an_unknown_one_is(
    instance: Instance, stranger: Any
) -> None:
    client = signed_in_client(stranger)

    theirs = client.get("/api/instances/demo/")
    unknown = client.get("/api/instances/nope/")
    patch = client.patch("/api/instances/demo/", {"name": "Mine"}, format="json")
    secret = client.put("/api/instances/demo/secrets/KEY/", {"value": "x"}, format="json")

    assert [r.status_code for r in (theirs, unknown, patch, secret)] == [404, 404, 404, 404]
    assert theirs.json() == unknown.json() == {"code": "not_found", "message": "instance not found"}
    assert Instance.objects.get(slug="demo").name == "Demo"


def test_a_member_reads_the_instance_and_its_mates_but_not_its_configuration(
    instance: Instance, owner: Any
) -> None:
    Mate.objects.filter(instance=instance).update(system_prompt="Secret house rules.")
    client = signed_in_client(_member(instance))

    body = client.get("/api/instances/demo/").json()
    listed = client.get("/api/instances/demo/mates/").json()["results"]
    owners_view = signed_in_client(owner).get("/api/instances/demo/mates/").json()["results"]
    patch = client.patch("/api/instances/demo/", {"name": "Mine"}, format="json")
    members = client.get("/api/instances/demo/members/")

    assert body["role"] == "member"
    assert [m["is_default"] for m in body["mates"]] == [True]
    assert [sorted(m) for m in (*body["mates"], *listed)] == [
        ["category", "description", "id", "is_default", "name"]
    ] * 2
    assert [m["system_prompt"] for m in owners_view] == ["Secret house rules."]
    assert "configuration" not in body
    assert patch.status_code == 403
    assert patch.json()["code"] == "permission_denied"
    assert members.status_code == 403
    assert Instance.objects.get(slug="demo").name == "Demo"


def test_an_admin_edits_settings_tier_map_and_prompt_sections(
    instance: Instance, django_capture_on_commit_callbacks: Any
) -> None:
    client = signed_in_client(_member(instance, "admin"))
    tiers = {"fast": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}]}

    patched = client.patch(
        "/api/instances/demo/",
        {"name": "Renamed", "tier_map": tiers, "memory_enabled": False, "api_tokens_per_day": 500},
        format="json",
    )
    with django_capture_on_commit_callbacks(execute=True):  # the prompt cache drops on commit
        section = client.put(
            "/api/instances/demo/prompt-sections/persona/", {"content": "Be brief."}, format="json"
        )
    detail = client.get("/api/instances/demo/").json()

    assert patched.status_code == 200, patched.content
    assert section.json() == {"key": "persona", "content": "Be brief."}
    config = detail["configuration"]
    assert detail["name"] == "Renamed"
    assert detail["memory_enabled"] is False
    assert config["tier_map"] == tiers
    assert config["api_tokens_per_day"] == 500
    assert config["prompt_sections"]["persona"] == "Be brief."
    assert config["tier_secrets_missing"] == ["OPENAI_API_KEY"]
    assert PromptSection.objects.get(instance=instance, key="persona").content == "Be brief."


def test_bad_settings_are_refused_with_the_field_named_and_nothing_changed(
    instance: Instance, owner: Any
) -> None:
    client = signed_in_client(owner)

    bad_tiers = client.patch(
        "/api/instances/demo/", {"tier_map": {"turbo": [{"model": "a/b"}]}}, format="json"
    )
    string_bool = client.patch("/api/instances/demo/", {"memory_enabled": "false"}, format="json")
    unknown = client.patch("/api/instances/demo/", {"slug": "renamed"}, format="json")
    section = client.put(
        "/api/instances/demo/prompt-sections/bogus/", {"content": "x"}, format="json"
    )

    assert bad_tiers.status_code == 400
    assert bad_tiers.json()["code"] == "invalid"
    assert "Unknown tier 'turbo'" in bad_tiers.json()["fields"]["tier_map"][0]
    assert string_bool.json()["fields"] == {"memory_enabled": ["must be a JSON boolean"]}
    assert unknown.json()["fields"] == {"slug": ["unknown field"]}
    assert section.status_code == 404
    fresh = Instance.objects.get(slug="demo")
    assert (fresh.tier_map, fresh.memory_enabled, fresh.slug) == ({}, True, "demo")


def test_an_admin_sets_the_tool_preselection_settings_within_their_bounds(
    instance: Instance,
) -> None:
    client = signed_in_client(_member(instance, "admin"))

    patched = client.patch(
        "/api/instances/demo/",
        {"tools_offer_all_up_to": 3, "model_tool_preselection": True},
        format="json",
    )
    too_many = client.patch("/api/instances/demo/", {"tools_offer_all_up_to": 6}, format="json")
    negative = client.patch("/api/instances/demo/", {"tools_offer_all_up_to": -1}, format="json")
    string_bool = client.patch(
        "/api/instances/demo/", {"model_tool_preselection": "false"}, format="json"
    )

    assert patched.status_code == 200, patched.content
    config = patched.json()["configuration"]
    assert (config["tools_offer_all_up_to"], config["model_tool_preselection"]) == (3, True)
    assert too_many.status_code == 400
    assert too_many.json()["fields"] == {
        "tools_offer_all_up_to": ["Ensure this value is less than or equal to 5."]
    }
    assert negative.json()["fields"] == {
        "tools_offer_all_up_to": ["Ensure this value is greater than or equal to 0."]
    }
    assert string_bool.json()["fields"] == {"model_tool_preselection": ["must be a JSON boolean"]}
    fresh = Instance.objects.get(slug="demo")
    assert (fresh.tools_offer_all_up_to, fresh.model_tool_preselection) == (3, True)


def test_the_owner_manages_mates_and_one_default_remains(instance: Instance, owner: Any) -> None:
    client = signed_in_client(owner)

    made = client.post(
        "/api/instances/demo/mates/",
        {"name": "Coder", "category": "code", "system_prompt": "You code.", "is_default": True},
        format="json",
    )
    duplicate = client.post("/api/instances/demo/mates/", {"name": "Coder"}, format="json")
    mate_id = made.json()["id"]
    edited = client.patch(
        f"/api/instances/demo/mates/{mate_id}/", {"description": "Writes code"}, format="json"
    )
    listed = client.get("/api/instances/demo/mates/").json()["results"]

    assert made.status_code == 201, made.content
    assert duplicate.status_code == 400
    assert "name" in duplicate.json()["fields"]
    assert edited.json()["description"] == "Writes code"
    assert [m["name"] for m in listed if m["is_default"]] == ["Coder"]
    assert Mate.objects.filter(instance=instance, is_default=True).count() == 1
    deleted = client.delete(f"/api/instances/demo/mates/{mate_id}/")
    assert deleted.status_code == 204
    assert not Mate.objects.filter(pk=mate_id).exists()


def test_secrets_are_set_and_deleted_but_never_read_back(instance: Instance, owner: Any) -> None:
    client = signed_in_client(owner)

    put = client.put(
        "/api/instances/demo/secrets/OPENAI_API_KEY/", {"value": "sk-live-123"}, format="json"
    )
    detail = client.get("/api/instances/demo/")
    read = client.get("/api/instances/demo/secrets/OPENAI_API_KEY/")

    assert put.status_code == 204
    assert instance_secret_get(instance=instance, name="OPENAI_API_KEY") == "sk-live-123"
    assert b"sk-live-123" not in detail.content
    assert [s["name"] for s in detail.json()["configuration"]["secrets"]] == ["OPENAI_API_KEY"]
    assert read.status_code == 405
    assert client.delete("/api/instances/demo/secrets/OPENAI_API_KEY/").status_code == 204
    assert client.delete("/api/instances/demo/secrets/OPENAI_API_KEY/").status_code == 404
    assert not InstanceSecret.objects.filter(instance=instance).exists()


def test_members_are_listed_for_admins(instance: Instance, owner: Any) -> None:
    helper = _member(instance, "member")

    body = signed_in_client(owner).get("/api/instances/demo/members/").json()

    assert [(m["username"], m["role"]) for m in body["results"]] == [
        ("owner", "owner"),
        (helper.username, "member"),
    ]


def _cursor(position: str) -> str:
    """A DRF cursor (base64 of ``p=<position>``) as a client could forge it."""
    return base64.b64encode(f"p={position}".encode()).decode()


def test_members_and_mates_are_cursor_paginated(instance: Instance, owner: Any) -> None:
    helpers = [_member(instance) for _ in range(2)]
    made = [Mate.objects.create(instance=instance, name=f"Mate {n}") for n in range(2)]
    client = signed_in_client(owner)

    members: list[list[str]] = []
    mates: list[list[str]] = []
    for path, into, key in (("members", members, "username"), ("mates", mates, "name")):
        page = client.get(f"/api/instances/demo/{path}/", {"page_size": 2}).json()
        into.append([row[key] for row in page["results"]])
        while page["next"] is not None:
            page = client.get(page["next"]).json()
            into.append([row[key] for row in page["results"]])
    bad = [
        client.get(f"/api/instances/demo/{path}/", {"cursor": _cursor(position)})
        for path, position in (("members", "not-a-time"), ("mates", "1 OR 1=1"), ("mates", "x"))
    ]

    assert members == [["owner", helpers[0].username], [helpers[1].username]]
    default = Mate.objects.get(instance=instance, is_default=True).name
    assert mates == [[default, made[0].name], [made[1].name]]
    assert [(b.status_code, b.json()) for b in bad] == [
        (
            400,
            {
                "code": "invalid_cursor",
                "message": "Invalid cursor: use the next or previous link of a page.",
            },
        )
    ] * 3


@pytest.mark.parametrize("language", ["lij", "xx", "ext", "en_US", "english"])
def test_a_default_language_the_assistant_does_not_answer_in_is_refused(
    instance: Instance, owner: Any, language: str
) -> None:
    response = signed_in_client(owner).patch(
        "/api/instances/demo/", {"default_language": language}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["default_language"]
    assert Instance.objects.get(slug="demo").default_language == "en"


@pytest.mark.parametrize(("language", "answers_in"), [("de-CH", "de"), ("fil", "tl"), ("pt", "pt")])
def test_a_supported_default_language_is_kept_as_written(
    instance: Instance, owner: Any, language: str, answers_in: str
) -> None:
    from pipeline.language import supported

    response = signed_in_client(owner).patch(
        "/api/instances/demo/", {"default_language": language}, format="json"
    )

    assert response.status_code == 200, response.content
    assert Instance.objects.get(slug="demo").default_language == language
    assert supported(language) == answers_in


def test_the_admin_form_refuses_an_unsupported_default_language(instance: Instance) -> None:
    from django.forms import modelform_factory

    form_class = modelform_factory(Instance, fields=("slug", "name", "default_language"))
    refused = form_class(
        {"slug": "demo", "name": "Demo", "default_language": "lij"}, instance=instance
    )
    kept = form_class({"slug": "demo", "name": "Demo", "default_language": "fr"}, instance=instance)

    assert not refused.is_valid()
    assert refused.errors == {
        "default_language": ["'lij' is not a language the assistant answers in"]
    }
    assert kept.is_valid(), kept.errors
