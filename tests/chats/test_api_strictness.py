"""The REST API takes exactly what the WebSocket protocol takes: ids, envelopes, types, JSON."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chats import services
from chats.models import Chat, UserKeys
from instances.models import InstanceMember
from openmates import crypto, ids, vault
from pipeline import protocol
from pipeline.ids import new_id
from tests.chats.rest import PASSWORD, client_envelope, signed_in_client

KDF = {
    "name": "PBKDF2",
    "hash": "SHA-256",
    "iterations": 600000,
    "salt": "MDEyMzQ1Njc4OWFiY2RlZg==",
}


@pytest.fixture
def member(keyed_owner: Any, chat_instance: Any) -> Any:
    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    return keyed_owner


def _create_body(chat_instance: Any, **overrides: Any) -> dict[str, Any]:
    return {
        "chat_id": new_id(),
        "instance": chat_instance.slug,
        "encrypted_chat_key": client_envelope(b"chat key"),
        **overrides,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chat_id", str(uuid.uuid4())),
        ("chat_id", new_id().upper()),
        ("chat_id", new_id().replace("-", "")),
        ("encrypted_chat_key", "AAAA"),
        ("encrypted_chat_key", base64.b64encode(b"\x02" + bytes(40)).decode()),
        ("encrypted_chat_key", base64.b64encode(b"\x01" + bytes(35)).decode()),
        ("encrypted_chat_key", "not base64!"),
        ("encrypted_chat_key", 12345),
        ("encrypted_title", "VGl0bGU="),
    ],
)
def test_create_refuses_what_the_protocol_refuses(
    member: Any, chat_instance: Any, field: str, value: Any
) -> None:
    body = _create_body(chat_instance, **{field: value})
    answer = signed_in_client(member).post("/api/chats/", body, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert field in answer.json()["fields"]
    assert not Chat.objects.filter(owner=member).exists()


def test_create_takes_a_uuid7_and_envelopes_as_the_protocol_does(
    member: Any, chat_instance: Any
) -> None:
    body = _create_body(chat_instance, encrypted_title=client_envelope(b"title"))
    frame = protocol.ChatCreate.model_validate({"type": "chat.create", "request_id": "r", **body})
    assert frame.chat_id == body["chat_id"]
    answer = signed_in_client(member).post("/api/chats/", body, format="json")
    assert answer.status_code == 201
    assert Chat.objects.get(pk=body["chat_id"]).encrypted_title == body["encrypted_title"]


def test_the_shared_checks_agree_with_the_envelope_floor() -> None:
    smallest = base64.b64encode(b"\x01" + bytes(ids.MIN_ENVELOPE_BYTES - 1)).decode()
    assert ids.envelope_problem(smallest) is None
    short = base64.b64encode(b"\x01" + bytes(ids.MIN_ENVELOPE_BYTES - 2)).decode()
    assert ids.envelope_problem(short) == "must be a docs/crypto.md §3 envelope (version 1)"
    assert ids.is_uuid7(new_id())
    assert not ids.is_uuid7(new_id().upper())


def test_form_encoded_bodies_are_refused(member: Any, chat_instance: Any) -> None:
    client = signed_in_client(member)
    form = client.post("/api/chats/", _create_body(chat_instance))  # multipart
    assert form.status_code == 415
    urlencoded = client.post(
        "/api/chats/",
        "chat_id=x&instance=y",
        content_type="application/x-www-form-urlencoded",
    )
    assert urlencoded.status_code == 415
    assert not Chat.objects.filter(owner=member).exists()


@pytest.fixture
def chat(member: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=member, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=client_envelope()
    )


@pytest.mark.parametrize(
    "patch",
    [
        {"version": "1"},
        {"version": 1.0},
        {"version": True},
        {"version": 1, "pinned": "true"},
        {"version": 1, "pinned": 1},
        {"version": 1, "encrypted_title": "TmV3"},
    ],
)
def test_patch_takes_strict_integers_booleans_and_envelopes(
    chat: Chat, member: Any, patch: dict[str, Any]
) -> None:
    answer = signed_in_client(member).patch(f"/api/chats/{chat.pk}/", patch, format="json")
    assert answer.status_code == 400
    assert Chat.objects.get(pk=chat.pk).version == 1


def test_patch_with_json_integers_and_booleans_works(chat: Chat, member: Any) -> None:
    answer = signed_in_client(member).patch(
        f"/api/chats/{chat.pk}/", {"version": 1, "pinned": True}, format="json"
    )
    assert answer.status_code == 200
    assert Chat.objects.get(pk=chat.pk).pinned is True


def test_message_store_takes_a_strict_version_and_an_envelope(chat: Chat, member: Any) -> None:
    message, _ = services.user_message_accept(chat=chat, message_id=new_id(), user=member)
    client = signed_in_client(member)
    url = f"/api/chats/{chat.pk}/messages/{message.pk}/"
    assert (
        client.put(url, {"encrypted_content": "AQID", "version": 0}, format="json").status_code
        == 400
    )
    content = client_envelope(b"content")
    assert (
        client.put(url, {"encrypted_content": content, "version": "0"}, format="json").status_code
        == 400
    )
    stored = client.put(url, {"encrypted_content": content, "version": 0}, format="json")
    assert stored.status_code == 200
    assert stored.json()["version"] == 1


def _deep(levels: int) -> str:
    return '{"kdf": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("url", ["/api/chats/", "/api/chats/keys/"])
@pytest.mark.parametrize("levels", [100_000, 40])
def test_a_deeply_nested_body_is_a_400_with_a_stable_code(
    member: Any, url: str, levels: int
) -> None:
    client = signed_in_client(member)
    method = client.post if url == "/api/chats/" else client.put
    answer = method(url, _deep(levels), content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "too_deeply_nested"
    assert not UserKeys.objects.filter(user=member).exists()


def test_a_body_within_the_depth_limit_still_parses(member: Any) -> None:
    client = signed_in_client(member)
    body = json.dumps({"kdf": [[[]]]})
    answer = client.put("/api/chats/keys/", body, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert "wrapped_master_key" in answer.json()["fields"]


@pytest.fixture
def plain_owner(owner: Any) -> Iterator[Any]:
    """``owner`` as createsuperuser or the admin leave it: no transit key yet."""
    key_name = vault.user_key_name(owner.pk)
    yield owner
    vault.delete_key(key_name)
    crypto.forget_key(key_name)


def test_setting_keys_creates_the_users_transit_key(plain_owner: Any) -> None:
    key_name = vault.user_key_name(plain_owner.pk)
    with pytest.raises(vault.VaultError) as missing:
        vault.key_latest_version(key_name)
    assert missing.value.reason == "not_found"
    keys = {
        "wrapped_master_key": "AQID",
        "recovery_wrapped_master_key": "BAUG",
        "master_key_id": "AAAAAAAAAAA=",
        "recovery_key_id": "AQEBAQEBAQE=",
        "kdf": KDF,
        "password": PASSWORD,
    }
    answer = signed_in_client(plain_owner).put("/api/chats/keys/", keys, format="json")
    assert answer.status_code == 200
    assert vault.key_latest_version(key_name) == 1
    sealed = crypto.seal(
        key_name=key_name,
        purpose=services.SERVER_MANAGED_PURPOSE,
        owner_id=plain_owner.pk,
        object_id="probe",
        plaintext=b"kept reply",
    )
    assert services.sealed_text_open(owner_id=plain_owner.pk, object_id="probe", sealed=sealed) == (
        "kept reply"
    )


def test_user_keys_set_ensures_the_transit_key_for_a_replacement_too(plain_owner: Any) -> None:
    key_name = vault.user_key_name(plain_owner.pk)
    services.user_keys_set(
        user=plain_owner,
        wrapped_master_key="AQID",
        recovery_wrapped_master_key="BAUG",
        master_key_id="AAAAAAAAAAA=",
        recovery_key_id="AQEBAQEBAQE=",
        kdf=KDF,
    )
    vault.delete_key(key_name)
    crypto.forget_key(key_name)
    services.user_keys_set(
        user=plain_owner,
        wrapped_master_key="BwgJ",
        recovery_wrapped_master_key="BAUG",
        master_key_id="AAAAAAAAAAA=",
        recovery_key_id="AQEBAQEBAQE=",
        kdf=KDF,
        version=1,
    )
    assert vault.key_latest_version(key_name) == 1
