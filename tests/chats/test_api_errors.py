"""REST errors carry a stable code (docs/architecture.md §11); bad path ids are 404, never 500."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.test import APIClient

from chats import services
from chats.models import Chat, Message, UserKeys
from instances.models import InstanceMember
from openmates.api_errors import error_body, exception_handler
from pipeline.ids import new_id
from tests.chats.rest import PUT_KEYS, client_envelope, signed_in_client

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
KEYS = PUT_KEYS
# Path ids that can name nothing: NUL (PostgreSQL refuses it in text), not a UUID,
# upper-case, a UUIDv4, a UUIDv7 without dashes.
BAD_IDS = ["%00", "x%00y", "not-an-id", "UPPER", "0190a7c4-1b2e-4c3d-8e4f-5a6b7c8d9e0f"]


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    return services.chat_create(
        user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


def test_no_credentials_is_not_authenticated(db: Any) -> None:
    answer = APIClient().get("/api/chats/")
    assert answer.status_code == 401
    assert answer.json() == {
        "code": "not_authenticated",
        "message": "Authentication credentials were not provided.",
    }


def test_an_unknown_chat_is_not_found(chat: Chat, keyed_owner: Any) -> None:
    answer = signed_in_client(keyed_owner).get(f"/api/chats/{new_id()}/")
    assert answer.status_code == 404
    assert answer.json() == {"code": "not_found", "message": "chat not found"}


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_chat_id_that_is_not_a_uuid7_is_not_found_everywhere(
    chat: Chat, keyed_owner: Any, bad: str
) -> None:
    client = signed_in_client(keyed_owner)
    body = {"encrypted_content": client_envelope(), "version": 0}
    answers = [
        client.get(f"/api/chats/{bad}/"),
        client.patch(f"/api/chats/{bad}/", {"version": 1}, format="json"),
        client.delete(f"/api/chats/{bad}/"),
        client.get(f"/api/chats/{bad}/messages/"),
        client.put(f"/api/chats/{bad}/messages/{new_id()}/", body, format="json"),
        client.put(f"/api/chats/{bad}/embeds/{new_id()}/", body, format="json"),
    ]
    for answer in answers:
        assert answer.status_code == 404
        assert answer.json() == {"code": "not_found", "message": "chat not found"}
    assert Chat.objects.filter(pk=chat.pk).exists()


@pytest.mark.parametrize("bad", BAD_IDS)
def test_message_and_embed_ids_that_are_not_uuid7_are_not_found(
    chat: Chat, keyed_owner: Any, bad: str
) -> None:
    client = signed_in_client(keyed_owner)
    body = {"encrypted_content": client_envelope(), "version": 0}

    message = client.put(f"/api/chats/{chat.pk}/messages/{bad}/", body, format="json")
    embed = client.put(f"/api/chats/{chat.pk}/embeds/{bad}/", body, format="json")

    assert (message.status_code, message.json()) == (
        404,
        {"code": "not_found", "message": "message not found"},
    )
    assert (embed.status_code, embed.json()) == (
        404,
        {"code": "not_found", "message": "embed not found"},
    )
    assert not Message.objects.filter(chat=chat).exists()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        base64.b64encode(b"p=%00").decode(),
        base64.b64encode(b"p=yesterday").decode(),
        base64.b64encode(b"p=2026-13-45 99:00:00").decode(),
    ],
)
def test_a_bad_cursor_is_a_bad_request(chat: Chat, keyed_owner: Any, cursor: str) -> None:
    answer = signed_in_client(keyed_owner).get("/api/chats/", {"cursor": cursor})
    assert answer.status_code == 400
    assert answer.json() == {
        "code": "invalid_cursor",
        "message": "Invalid cursor: use the next or previous link of a page.",
    }


@pytest.mark.parametrize("size", ["0", "-1", "abc", "2.5", "", "\u0662"])
def test_a_bad_page_size_is_a_bad_request(chat: Chat, keyed_owner: Any, size: str) -> None:
    answer = signed_in_client(keyed_owner).get("/api/chats/", {"page_size": size})
    assert answer.status_code == 400
    assert answer.json() == {
        "code": "invalid_page_size",
        "message": "page_size must be a whole number from 1 to 200.",
    }


def test_a_page_size_over_the_maximum_is_cut_to_it(keyed_owner: Any, chat_instance: Any) -> None:
    for _ in range(3):
        services.chat_create(
            user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
        )
    client = signed_in_client(keyed_owner)
    assert len(client.get("/api/chats/", {"page_size": "2"}).json()["results"]) == 2
    big = client.get("/api/chats/", {"page_size": "100000"})
    assert big.status_code == 200
    assert len(big.json()["results"]) == 3


def test_a_real_cursor_still_pages(keyed_owner: Any, chat_instance: Any) -> None:
    made = [
        services.chat_create(
            user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
        ).pk
        for _ in range(2)
    ]
    client = signed_in_client(keyed_owner)
    first = client.get("/api/chats/", {"page_size": 1}).json()
    second = client.get(first["next"]).json()
    assert [first["results"][0]["chat_id"], second["results"][0]["chat_id"]] == made[::-1]


def test_a_body_that_is_not_json_is_a_parse_error(keyed_owner: Any) -> None:
    answer = signed_in_client(keyed_owner).post("/api/chats/", "{", content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "parse_error"
    assert answer.json()["message"].startswith("JSON parse error")
    assert set(answer.json()) == {"code", "message"}


def test_a_missing_field_is_invalid_with_field_errors(keyed_owner: Any) -> None:
    answer = signed_in_client(keyed_owner).delete("/api/account/", {}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {
        "code": "invalid",
        "message": "password: This field is required.",
        "fields": {"password": ["This field is required."]},
    }


def test_nested_field_errors_stay_under_fields(keyed_owner: Any) -> None:
    answer = signed_in_client(keyed_owner).put(
        "/api/chats/keys/", {**KEYS, "kdf": ["PBKDF2"], "master_key_id": 7 * "AAAA"}, format="json"
    )
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "invalid"
    assert body["fields"] == {
        "master_key_id": ["Ensure this field has no more than 24 characters."],
        "kdf": ["must be a JSON object without NUL characters"],
    }
    assert body["message"] == (
        "master_key_id: Ensure this field has no more than 24 characters.; "
        "kdf: must be a JSON object without NUL characters"
    )


def test_a_nul_inside_the_kdf_is_refused_not_a_500(keyed_owner: Any) -> None:
    kdf = {**KEYS["kdf"], "note": ["a\x00b"]}
    answer = signed_in_client(keyed_owner).put(
        "/api/chats/keys/", {**KEYS, "kdf": kdf}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["fields"] == {"kdf": ["must be a JSON object without NUL characters"]}
    assert not UserKeys.objects.filter(user=keyed_owner).exists()


def test_versions_beyond_a_bigint_are_refused_not_a_500(chat: Chat, keyed_owner: Any) -> None:
    client = signed_in_client(keyed_owner)
    patched = client.patch(f"/api/chats/{chat.pk}/", {"version": 2**63}, format="json")
    since = client.get(f"/api/chats/{chat.pk}/messages/", {"since": str(2**63)})

    assert patched.status_code == 400
    assert patched.json()["code"] == "invalid"
    assert list(patched.json()["fields"]) == ["version"]
    assert (since.status_code, since.json()) == (
        400,
        {
            "code": "invalid",
            "message": "since: must be an integer chat version",
            "fields": {"since": ["must be an integer chat version"]},
        },
    )


def test_wrong_method_and_media_type_have_codes(keyed_owner: Any) -> None:
    client = signed_in_client(keyed_owner)
    wrong_method = client.post("/api/chats/keys/", KEYS, format="json")
    form = client.post("/api/chats/", {"chat_id": new_id()})
    assert (wrong_method.status_code, wrong_method.json()) == (
        405,
        {"code": "method_not_allowed", "message": 'Method "POST" not allowed.'},
    )
    assert form.status_code == 415
    assert form.json()["code"] == "unsupported_media_type"


def test_coded_bodies_and_their_headers_are_kept(db: Any) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer om_0123456789ab_" + "a" * 43)
    answer = client.get("/api/chats/")
    assert answer.status_code == 401
    assert answer.json() == {
        "code": "invalid_token",
        "message": "The API token is malformed, unknown, revoked or expired.",
    }
    assert answer["WWW-Authenticate"] == 'Bearer realm="api", error="invalid_token"'


def test_django_exceptions_become_coded_bodies() -> None:
    missing = exception_handler(Http404(), {})
    refused = exception_handler(DjangoPermissionDenied("not yours"), {})
    assert missing is not None
    assert refused is not None
    assert (missing.status_code, missing.data) == (
        404,
        {"code": "not_found", "message": "Not found."},
    )
    assert (refused.status_code, refused.data) == (
        403,
        {"code": "permission_denied", "message": "not yours"},
    )
    assert exception_handler(ValueError("not an API error"), {}) is None


def test_throttled_and_custom_codes() -> None:
    assert error_body(exceptions.Throttled(wait=1.2)) == {
        "code": "throttled",
        "message": "Request was throttled. Expected available in 2 seconds.",
        "retry_after": 2,
    }
    assert error_body(exceptions.PermissionDenied("no", code="wrong_password")) == {
        "code": "wrong_password",
        "message": "no",
    }
    assert error_body(exceptions.ValidationError(["whole body is wrong"])) == {
        "code": "invalid",
        "message": "whole body is wrong",
    }


def test_an_unexpected_error_under_api_is_json_internal(
    keyed_owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chats import api

    def broken(self: Any, request: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(api.ChatListApi, "get", broken)
    client = signed_in_client(keyed_owner)
    client.raise_request_exception = False
    response = client.get("/api/chats/")
    assert response.status_code == 500
    assert response.json() == {
        "code": "internal",
        "message": "Something went wrong on the server.",
    }


def test_an_unexpected_error_outside_api_keeps_djangos_page(rf: Any) -> None:
    from openmates.api_errors import server_error

    response = server_error(rf.get("/chats/"))
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")


def test_an_unknown_api_route_is_json_not_found(keyed_owner: Any) -> None:
    answer = signed_in_client(keyed_owner).get("/api/nonexistent/")
    assert answer.status_code == 404
    assert answer.json() == {"code": "not_found", "message": "No such API route."}
    page = APIClient().get("/no-such-page/")
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")
