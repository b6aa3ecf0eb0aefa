"""Input serializers of the REST API take JSON types as they are (openmates.rest's strict
fields): a number is never text, a string never a boolean or an integer (docs/api.md §1)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework import serializers

from instances.models import Instance, InstanceSecret, Mate, PromptSection
from memories.models import Memory
from openmates.rest import NoUnknownFields, StrictBooleanField, StrictIntegerField, StringOnly
from pipeline.ids import new_id
from skills.models import InstanceSkill
from tests.chats.rest import client_envelope, signed_in_client

API_MODULES = (
    "accounts.api",
    "chats.api",
    "instances.serializers",
    "instances.api",
    "memories.api",
    "skills.api",
    "openai_api.analytics",
)
# A query string is text: these integers are parsed from it, not sent as JSON.
QUERY_STRING_INTEGERS = {("MemorySearchQuery", "limit")}
LAX_TO_STRICT: tuple[tuple[type, type], ...] = (
    (serializers.CharField, StringOnly),
    (serializers.ChoiceField, StringOnly),
    (serializers.BooleanField, StrictBooleanField),
    (serializers.IntegerField, StrictIntegerField),
)


def _input_serializers() -> list[type[serializers.Serializer]]:
    for name in API_MODULES:
        importlib.import_module(name)
    found: list[type[serializers.Serializer]] = []
    stack = list(serializers.Serializer.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__ in API_MODULES and not issubclass(cls, serializers.ModelSerializer):
            found.append(cls)
    return found


def test_every_input_field_of_the_api_is_a_strict_one() -> None:
    classes = _input_serializers()
    lax = []
    for cls in classes:
        for name, field in cls().fields.items():
            if field.read_only or (cls.__name__, name) in QUERY_STRING_INTEGERS:
                continue
            text = isinstance(field, serializers.CharField | serializers.ChoiceField)
            if (
                (text and not isinstance(field, StringOnly))
                or (
                    isinstance(field, serializers.BooleanField)
                    and not isinstance(field, StrictBooleanField)
                )
                or (
                    isinstance(field, serializers.IntegerField)
                    and not isinstance(field, StrictIntegerField)
                )
            ):
                lax.append(f"{cls.__qualname__}.{name}")

    # The walk reaches the serializers nested in views too (so the check is not empty).
    assert {"MemoryCreateSerializer", "InstanceUpdateIn", "ChatCreateSerializer"} <= {
        cls.__name__ for cls in classes
    }
    assert lax == []


# Serializers of a query string: the paginator's own parameters (cursor, page_size) come
# with theirs.
QUERY_STRING_SERIALIZERS = {"_CategoryQuery", "MemorySearchQuery"}


def test_every_request_body_serializer_refuses_unknown_fields() -> None:
    lenient = sorted(
        cls.__qualname__
        for cls in _input_serializers()
        if not issubclass(cls, NoUnknownFields)
        and cls.__name__ not in QUERY_STRING_SERIALIZERS
        and not cls.__name__.endswith("Out")
    )

    assert lenient == []


@pytest.mark.django_db
def test_an_unknown_field_is_refused_across_the_api(instance: Instance, owner: Any) -> None:
    client = signed_in_client(owner)

    answers = {
        "memory create": client.post(
            "/api/memories/demo/",
            {"category": "preference", "content": "x", "extra": 1},
            format="json",
        ),
        "memory settings": client.put(
            "/api/memories/demo/settings/", {"enabled": True, "also": 1}, format="json"
        ),
        "chat create": client.post(
            "/api/chats/",
            {
                "chat_id": new_id(),
                "instance": "demo",
                "encrypted_chat_key": client_envelope(),
                "colour": "red",
            },
            format="json",
        ),
    }

    for label, response in answers.items():
        body = response.json()
        assert (label, response.status_code, body["code"]) == (label, 400, "invalid")
        assert list(body["fields"].values()) == [["unknown field"]], label


@pytest.mark.django_db
def test_numbers_as_text_are_refused_across_the_api(instance: Instance, owner: Any) -> None:
    client = signed_in_client(owner)
    mate = Mate.objects.filter(instance=instance).first()
    assert mate is not None

    answers = {
        "memory create": client.post(
            "/api/memories/demo/", {"category": "fact", "content": 42}, format="json"
        ),
        "instance name": client.patch("/api/instances/demo/", {"name": 7}, format="json"),
        "prompt section": client.put(
            "/api/instances/demo/prompt-sections/identity/", {"content": 1.5}, format="json"
        ),
        "mate create": client.post("/api/instances/demo/mates/", {"name": 12345}, format="json"),
        "mate edit": client.patch(
            f"/api/instances/demo/mates/{mate.pk}/", {"description": 3}, format="json"
        ),
        "secret": client.put(
            "/api/instances/demo/secrets/OPENAI_API_KEY/", {"value": 123456}, format="json"
        ),
        "chat create": client.post(
            "/api/chats/",
            {"chat_id": new_id(), "instance": 5, "encrypted_chat_key": client_envelope()},
            format="json",
        ),
        "account delete": client.delete("/api/account/", {"password": 1234}, format="json"),
    }
    fields = {
        "memory create": "content",
        "instance name": "name",
        "prompt section": "content",
        "mate create": "name",
        "mate edit": "description",
        "secret": "value",
        "chat create": "instance",
        "account delete": "password",
    }

    for what, answer in answers.items():
        assert answer.status_code == 400, (what, answer.content)
        body = answer.json()
        assert body["code"] == "invalid", what
        assert body["fields"][fields[what]] == ["must be a JSON string"], what
        assert body["message"].startswith(f"{fields[what]}: must be a JSON string"), what
    assert Memory.objects.count() == 0
    assert Instance.objects.get(slug="demo").name == instance.name
    assert not PromptSection.objects.filter(instance=instance, content="1.5").exists()
    assert not Mate.objects.filter(name="12345").exists()
    assert not InstanceSecret.objects.filter(instance=instance).exists()
    assert get_user_model().objects.filter(pk=owner.pk).exists()


@pytest.mark.django_db
def test_choices_and_integers_take_their_own_json_type(instance: Instance, owner: Any) -> None:
    client = signed_in_client(owner)

    skill = InstanceSkill.objects.filter(instance=instance).select_related("skill")[0].skill

    category = client.post("/api/memories/demo/", {"category": 1, "content": "x"}, format="json")
    version = client.put(
        f"/api/skills/instances/demo/{skill.slug}/",
        {"enabled": True, "version": "1"},
        format="json",
    )
    limit = client.patch("/api/instances/demo/", {"api_requests_per_minute": 60.0}, format="json")

    assert category.json()["fields"] == {"category": ["must be a JSON string"]}
    assert version.status_code == 400
    assert version.json()["fields"] == {"version": ["must be a JSON integer"]}
    assert limit.json()["fields"] == {"api_requests_per_minute": ["must be a JSON integer"]}
    assert Instance.objects.get(slug="demo").api_requests_per_minute is None
