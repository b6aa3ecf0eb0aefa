"""The REST API under /api/memories/<instance>/ (memories.api): owner only, 404 otherwise,
the REST error contract, and an OpenAPI schema without warnings."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from instances.models import Instance
from memories.models import Memory, MemorySettings
from tests.chats.rest import signed_in_client
from tests.memories.conftest import member, remember, unit


def _url(instance: Instance, tail: str = "") -> str:
    return f"/api/memories/{instance.slug}/{tail}"


def _create(client: APIClient, instance: Instance, content: str, category: str = "fact") -> Any:
    response = client.post(
        _url(instance), {"category": category, "content": content}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_create_list_read_edit_and_delete_a_memory(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)

    made = _create(client, local_instance, "  Alice keeps bees  ", "fact")
    listed = client.get(_url(local_instance)).json()
    read = client.get(_url(local_instance, f"{made['id']}/")).json()
    edited = client.patch(
        _url(local_instance, f"{made['id']}/"),
        {"content": "Alice keeps goats", "category": "event"},
        format="json",
    )
    by_new_word = client.get(_url(local_instance, "search/"), {"q": "goats"}).json()
    by_old_word = client.get(_url(local_instance, "search/"), {"q": "bees -goats"}).json()
    deleted = client.delete(_url(local_instance, f"{made['id']}/"))

    assert made["content"] == "Alice keeps bees"
    assert made["category"] == "fact"
    assert made["source_chat_id"] is None
    assert [m["id"] for m in listed["results"]] == [made["id"]]
    assert read["content"] == "Alice keeps bees"
    assert edited.status_code == 200
    assert edited.json()["content"] == "Alice keeps goats"
    assert edited.json()["category"] == "event"
    assert [r["id"] for r in by_new_word["results"]] == [made["id"]]
    assert by_old_word["results"] == []
    assert deleted.status_code == 204
    assert not Memory.objects.exists()


def test_a_memory_created_without_a_category_is_general(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)

    made = client.post(_url(local_instance), {"content": "Alice keeps bees"}, format="json")

    assert made.status_code == 201, made.content
    assert made.json()["category"] == "general"
    assert Memory.objects.get().category == "general"


def test_a_category_only_edit_keeps_the_text_and_its_vector(
    local_instance: Any, alice: Any
) -> None:
    client = signed_in_client(alice)
    made = _create(client, local_instance, "Alice keeps bees")
    before = Memory.objects.get(pk=made["id"])

    edited = client.patch(
        _url(local_instance, f"{made['id']}/"), {"category": "preference"}, format="json"
    )

    after = Memory.objects.get(pk=made["id"])
    assert edited.json()["content"] == "Alice keeps bees"
    assert after.category == "preference"
    assert list(after.embedding) == list(before.embedding)
    assert bytes(after.content_sealed) == bytes(before.content_sealed)


def test_the_list_pages_by_cursor_and_filters_by_category(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)
    ids = [_create(client, local_instance, f"Fact number {n}")["id"] for n in range(3)]
    pref = _create(client, local_instance, "Likes jazz", "preference")["id"]

    first = client.get(_url(local_instance), {"page_size": 2}).json()
    second = client.get(first["next"]).json()
    only = client.get(_url(local_instance), {"category": "preference"}).json()
    wrong = client.get(_url(local_instance), {"category": "secret"})
    bad_cursor = client.get(_url(local_instance), {"cursor": base64.b64encode(b"p=x").decode()})

    assert [m["id"] for m in first["results"]] == [pref, ids[2]]
    assert [m["id"] for m in second["results"]] == [ids[1], ids[0]]
    assert second["next"] is None
    assert [m["id"] for m in only["results"]] == [pref]
    assert wrong.status_code == 400
    assert wrong.json()["code"] == "invalid"
    assert "category" in wrong.json()["fields"]
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["code"] == "invalid_cursor"


def test_another_user_gets_404_for_every_memory_url(
    local_instance: Any, alice: Any, bob: Any
) -> None:
    made = _create(signed_in_client(alice), local_instance, "Alice keeps bees")
    client = signed_in_client(bob)
    detail = _url(local_instance, f"{made['id']}/")

    answers = [
        client.get(detail),
        client.patch(detail, {"content": "Bob was here"}, format="json"),
        client.delete(detail),
    ]
    listed = client.get(_url(local_instance)).json()
    found = client.get(_url(local_instance, "search/"), {"q": "bees"}).json()
    exported = client.get(_url(local_instance, "export/")).json()
    counted = client.get(_url(local_instance, "settings/")).json()

    assert [a.status_code for a in answers] == [404, 404, 404]
    assert all(a.json()["code"] == "not_found" for a in answers)
    assert listed["results"] == []
    assert found["results"] == []
    assert exported["memories"] == []
    assert counted["categories"] == {}
    assert Memory.objects.get(pk=made["id"]).category == "fact"


def test_an_instance_the_user_is_not_a_member_of_answers_404(
    local_instance: Any, alice: Any
) -> None:
    outsider = member(Instance.objects.create(slug="elsewhere", name="Elsewhere"))
    client = signed_in_client(outsider)

    for tail in ("", "search/?q=x", "export/", "settings/"):
        response = client.get(_url(local_instance, tail))
        assert response.status_code == 404, tail
        assert response.json() == {"code": "not_found", "message": "instance not found"}
    assert client.get("/api/memories/no-such-instance/").status_code == 404


@pytest.mark.parametrize("memory_id", ["not-a-uuid", "00000000-0000-4000-8000-000000000000"])
def test_unknown_and_malformed_memory_ids_answer_404(
    local_instance: Any, alice: Any, memory_id: str
) -> None:
    response = signed_in_client(alice).get(_url(local_instance, f"{memory_id}/"))

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_without_credentials_the_api_answers_401(local_instance: Any) -> None:
    response = APIClient().get(_url(local_instance))

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_bad_bodies_get_the_error_contract(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)

    empty = client.post(_url(local_instance), {"category": "fact", "content": "  "}, format="json")
    long = client.post(
        _url(local_instance), {"category": "fact", "content": "x" * 2001}, format="json"
    )
    category = client.post(
        _url(local_instance), {"category": "secret", "content": "x"}, format="json"
    )
    form = client.post(_url(local_instance), "category=fact", content_type="text/plain")
    nothing = client.patch(
        _url(local_instance, "00000000-0000-4000-8000-000000000000/"), {}, format="json"
    )

    assert [r.status_code for r in (empty, long, category, form, nothing)] == [
        400,
        400,
        400,
        415,
        400,
    ]
    assert empty.json()["code"] == "invalid"
    assert set(category.json()["fields"]) == {"category"}
    assert form.json()["code"] == "unsupported_media_type"
    assert not Memory.objects.exists()


def test_a_number_is_never_taken_as_a_memory_text(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)
    made = _create(client, local_instance, "Alice keeps bees")

    created = client.post(_url(local_instance), {"category": "fact", "content": 42}, format="json")
    edited = client.patch(_url(local_instance, f"{made['id']}/"), {"content": 7.5}, format="json")
    listed = client.get(_url(local_instance)).json()

    for answer in (created, edited):
        assert answer.status_code == 400
        assert answer.json() == {
            "code": "invalid",
            "message": "content: must be a JSON string",
            "fields": {"content": ["must be a JSON string"]},
        }
    assert [(m["id"], m["content"]) for m in listed["results"]] == [
        (made["id"], "Alice keeps bees")
    ]


def test_search_takes_a_query_a_limit_and_a_category(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)
    tea = _create(client, local_instance, "Drinks green tea", "preference")["id"]
    _create(client, local_instance, "Owns a tea shop", "fact")

    found = client.get(
        _url(local_instance, "search/"), {"q": "tea", "category": "preference", "limit": "5"}
    ).json()
    too_many = client.get(_url(local_instance, "search/"), {"q": "tea", "limit": "51"})
    no_query = client.get(_url(local_instance, "search/"))

    assert [r["id"] for r in found["results"]] == [tea]
    assert found["results"][0]["content"] == "Drinks green tea"
    assert found["results"][0]["score"] == pytest.approx(1 / 61 + 1 / 61)
    assert too_many.status_code == 400
    assert no_query.status_code == 400
    assert "q" in no_query.json()["fields"]


def test_export_is_every_memory_as_one_json_file(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)
    made = [_create(client, local_instance, f"Fact number {n}")["id"] for n in range(3)]

    response = client.get(_url(local_instance, "export/"))

    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        f'attachment; filename="memories-{local_instance.slug}.json"'
    )
    body = json.loads(response.content)
    assert body["instance"] == local_instance.slug
    assert [m["id"] for m in body["memories"]] == made[::-1]
    assert {m["content"] for m in body["memories"]} == {f"Fact number {n}" for n in range(3)}


def test_the_memory_switch_and_the_counts_per_category(local_instance: Any, alice: Any) -> None:
    client = signed_in_client(alice)
    _create(client, local_instance, "Likes jazz", "preference")

    before = client.get(_url(local_instance, "settings/")).json()
    off = client.put(_url(local_instance, "settings/"), {"enabled": False}, format="json")
    string = client.put(_url(local_instance, "settings/"), {"enabled": "false"}, format="json")

    assert before == {"enabled": True, "instance_enabled": True, "categories": {"preference": 1}}
    assert off.json()["enabled"] is False
    assert MemorySettings.objects.get(user=alice).enabled is False
    assert string.status_code == 400
    assert string.json()["fields"] == {"enabled": ["must be a JSON boolean"]}


def test_forget_everything_needs_a_json_true(local_instance: Any, alice: Any, bob: Any) -> None:
    client = signed_in_client(alice)
    _create(client, local_instance, "Alice keeps bees")
    kept = remember(local_instance, bob, "Bob keeps bees")

    unconfirmed = client.post(_url(local_instance, "forget/"), {"confirm": "true"}, format="json")
    unsaid = client.post(_url(local_instance, "forget/"), {}, format="json")
    forgotten = client.post(_url(local_instance, "forget/"), {"confirm": True}, format="json")

    assert unconfirmed.status_code == 400
    assert unsaid.status_code == 400
    assert unsaid.json()["fields"] == {
        "confirm": ['required: the JSON boolean true ({"confirm": true})']
    }
    assert forgotten.status_code == 200
    assert forgotten.json() == {"deleted": 1}
    assert list(Memory.objects.values_list("id", flat=True)) == [kept.pk]


def test_embedding_failures_answer_503_and_bad_vectors_502(
    scripted_instance: Any, llm_script: Any
) -> None:
    user = member(scripted_instance)
    client = signed_in_client(user)
    llm_script.reply(error=503)
    llm_script.reply(embedding=[[0.0, 0.0, 0.0, 0.0]])
    llm_script.reply(embedding=[unit(1, 2, 3)])

    down = client.post(_url(scripted_instance), {"category": "fact", "content": "x"}, format="json")
    zeros = client.post(
        _url(scripted_instance), {"category": "fact", "content": "x"}, format="json"
    )
    short = client.post(
        _url(scripted_instance), {"category": "fact", "content": "x"}, format="json"
    )

    assert (down.status_code, down.json()["code"]) == (503, "embedding_unavailable")
    assert (zeros.status_code, zeros.json()["code"]) == (502, "embedding_invalid")
    assert zeros.json()["message"] == "the embedding is all zeros"
    assert (short.status_code, short.json()["code"]) == (502, "embedding_invalid")
    assert short.json()["message"] == "the embedding has 3 dimensions; this instance stores 4"
    assert not Memory.objects.exists()


def test_the_schema_lists_the_memory_routes_and_generates_without_warnings(
    transactional_db: Any,
) -> None:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    schema = yaml.safe_load(response.content)
    out = io.StringIO()

    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)

    assert {
        "/api/memories/{instance}/",
        "/api/memories/{instance}/search/",
        "/api/memories/{instance}/export/",
        "/api/memories/{instance}/settings/",
        "/api/memories/{instance}/forget/",
        "/api/memories/{instance}/{memory_id}/",
    } <= set(schema["paths"])
    create = schema["paths"]["/api/memories/{instance}/"]["post"]
    assert create["operationId"] == "memories_create"


def _chat_of(user: Any, instance: Instance) -> str:
    from chats.services import chat_create
    from pipeline.ids import new_id
    from tests.pipeline.conftest import envelope

    made = chat_create(
        user=user, chat_id=new_id(), instance=instance, encrypted_chat_key=envelope()
    )
    return str(made.pk)


def test_the_source_chat_is_a_chat_of_the_user_in_the_instance(
    local_instance: Any, alice: Any, bob: Any, scripted_instance: Any
) -> None:
    client = signed_in_client(alice)
    chat = _chat_of(alice, local_instance)
    member(scripted_instance, "alice")
    refused_ids = {
        "chat-1": "source_chat_id is a chat id (UUIDv7)",
        "0190d0c4-1d5a-7c3e-8f00-000000000003": "no such chat",
        _chat_of(bob, local_instance): "bob's chat",
        _chat_of(alice, scripted_instance): "alice's chat in another instance",
    }

    kept = client.post(
        _url(local_instance),
        {"category": "fact", "content": "Alice keeps bees", "source_chat_id": chat},
        format="json",
    )
    refused = {
        source: client.post(
            _url(local_instance),
            {"category": "fact", "content": "Alice keeps bees", "source_chat_id": source},
            format="json",
        )
        for source in refused_ids
    }

    assert kept.status_code == 201
    assert kept.json()["source_chat_id"] == chat
    assert [r.status_code for r in refused.values()] == [400, 400, 400, 400]
    assert refused["chat-1"].json()["fields"] == {
        "source_chat_id": ["source_chat_id is a chat id (UUIDv7)"]
    }
    for source, answer in list(refused.items())[1:]:
        assert answer.json()["fields"] == {
            "source_chat_id": ["source_chat_id names no chat of yours in this instance"]
        }, refused_ids[source]
    assert Memory.objects.get().source_chat_id == chat
