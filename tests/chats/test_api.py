"""/api/chats/ and /api/account/: owner only, ciphertext in and out, conflicts, deletion."""

from __future__ import annotations

import os
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from chats import cache, services
from chats.models import Chat, Message, UserKeys
from instances.models import InstanceMember
from openmates import crypto, vault
from pipeline import protocol
from pipeline.ids import new_id
from tests.chats.rest import PASSWORD, PUT_KEYS, USER_KEYS, client_envelope, signed_in_client

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="


def _id() -> str:
    return new_id()


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=keyed_owner,
        chat_id=_id(),
        instance=chat_instance,
        encrypted_chat_key=CHAT_KEY,
        encrypted_title=client_envelope(b"title"),
    )


def test_list_is_newest_first_paginated_and_only_mine(
    keyed_owner: Any, stranger: Any, chat_instance: Any
) -> None:
    ids = []
    for _ in range(3):
        made = services.chat_create(
            user=keyed_owner, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
        )
        ids.append(made.pk)
    services.chat_create(
        user=stranger, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )
    client = signed_in_client(keyed_owner)
    first = client.get("/api/chats/", {"page_size": 2}).json()
    assert [c["chat_id"] for c in first["results"]] == [ids[2], ids[1]]
    assert first["results"][0]["encrypted_chat_key"] == CHAT_KEY
    second = client.get(first["next"]).json()
    assert [c["chat_id"] for c in second["results"]] == [ids[0]]
    assert second["next"] is None


def test_another_users_chat_is_404_everywhere(chat: Chat, stranger: Any) -> None:
    client = signed_in_client(stranger)
    base = f"/api/chats/{chat.pk}/"
    message_id = _id()
    assert client.get(base).status_code == 404
    assert client.get(base + "messages/").status_code == 404
    assert client.patch(base, {"version": 1}, format="json").status_code == 404
    assert (
        client.put(
            base + f"messages/{message_id}/",
            {"encrypted_content": "AQ==", "version": 0},
            format="json",
        ).status_code
        == 404
    )
    assert client.delete(base).status_code == 404
    assert Chat.objects.filter(pk=chat.pk).exists()
    assert APIClient().get(base).status_code in (401, 403)


def test_create_needs_membership_of_the_instance(keyed_owner: Any, chat_instance: Any) -> None:
    client = signed_in_client(keyed_owner)
    body = {"chat_id": _id(), "instance": chat_instance.slug, "encrypted_chat_key": CHAT_KEY}
    assert client.post("/api/chats/", body, format="json").status_code == 404
    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    created = client.post("/api/chats/", body, format="json")
    assert created.status_code == 201
    assert created.json()["version"] == 1


def test_creating_under_another_users_chat_id_is_409_id_in_use(
    chat: Chat, stranger: Any, chat_instance: Any
) -> None:
    InstanceMember.objects.create(instance=chat_instance, user=stranger, role="member")
    body = {"chat_id": chat.pk, "instance": chat_instance.slug, "encrypted_chat_key": CHAT_KEY}

    answered = signed_in_client(stranger).post("/api/chats/", body, format="json")

    assert answered.status_code == 409
    assert answered.json()["code"] == "id_in_use"
    assert chat.pk not in answered.json()["message"]
    assert Chat.objects.get(pk=chat.pk).owner_id != stranger.pk


def test_messages_since_a_version_and_storing_ciphertext(chat: Chat, keyed_owner: Any) -> None:
    first, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    mark = Chat.objects.get(pk=chat.pk).version
    second, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    client = signed_in_client(keyed_owner)
    listed = client.get(f"/api/chats/{chat.pk}/messages/", {"since": mark}).json()
    assert [m["message_id"] for m in listed["messages"]] == [second.pk]
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    services.assistant_reply_keep(
        chat=chat, message_id=reply.pk, content="not stored yet", model="m", usage=None
    )
    kept = client.get(f"/api/chats/{chat.pk}/messages/", {"since": mark}).json()["messages"]
    assert kept[-1]["message_id"] == reply.pk
    assert kept[-1]["content"] == "not stored yet"
    assert kept[-1]["needs_store"] is True
    url = f"/api/chats/{chat.pk}/messages/{first.pk}/"
    content, other = client_envelope(b"first"), client_envelope(b"other")
    stored = client.put(url, {"encrypted_content": content, "version": 0}, format="json")
    assert stored.status_code == 200
    assert stored.json()["version"] == 1
    stale = client.put(url, {"encrypted_content": other, "version": 0}, format="json")
    assert stale.status_code == 409
    assert stale.json()["code"] == "conflict"
    assert stale.json()["version"] == 1
    assert Message.objects.get(pk=first.pk).encrypted_content == content
    not_b64 = client.put(url, {"encrypted_content": "plain text!", "version": 1}, format="json")
    assert not_b64.status_code == 400


def test_a_400_kb_reply_is_stored_over_rest_and_its_server_copy_goes(
    chat: Chat, keyed_owner: Any
) -> None:
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    text = "A long answer — with “quotes”.\n" * 13_000
    assert len(text.encode()) > 400_000
    services.assistant_reply_keep(
        chat=chat, message_id=reply.pk, content=text, model="m", usage=None
    )
    client = signed_in_client(keyed_owner)
    listed = client.get(f"/api/chats/{chat.pk}/messages/").json()["messages"]
    assert listed[-1]["content"] == text
    assert listed[-1]["needs_store"] is True
    # The browser's envelope of that text: iv, key id and tag around as many bytes.
    ciphertext = client_envelope(os.urandom(len(text.encode()) + 16))
    assert len(ciphertext) == protocol.ciphertext_chars(len(text.encode()))
    url = f"/api/chats/{chat.pk}/messages/{reply.pk}/"
    stored = client.put(url, {"encrypted_content": ciphertext, "version": 0}, format="json")
    assert stored.status_code == 200
    assert stored.json()["version"] == 1
    row = Message.objects.get(pk=reply.pk)
    assert row.encrypted_content == ciphertext
    assert row.server_content is None
    too_long = client_envelope(os.urandom(protocol.MAX_REPLY_BYTES + 16 + 3))
    refused = client.put(url, {"encrypted_content": too_long, "version": 1}, format="json")
    assert refused.status_code == 400
    assert Message.objects.get(pk=reply.pk).version == 1


def test_chat_patch_conflicts_on_a_stale_version(chat: Chat, keyed_owner: Any) -> None:
    client = signed_in_client(keyed_owner)
    url = f"/api/chats/{chat.pk}/"
    ok = client.patch(
        url, {"version": 1, "encrypted_title": client_envelope(b"new")}, format="json"
    )
    assert ok.status_code == 200
    assert ok.json()["meta_version"] == 2
    stale = client.patch(
        url, {"version": 1, "encrypted_title": client_envelope(b"old")}, format="json"
    )
    assert stale.status_code == 409


def test_chat_patch_refuses_fields_it_does_not_know_and_changes_nothing(
    chat: Chat, keyed_owner: Any
) -> None:
    client = signed_in_client(keyed_owner)
    url = f"/api/chats/{chat.pk}/"
    refused = client.patch(
        url, {"version": 1, "user_id": 1, "mode": "server_managed"}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid"
    assert refused.json()["fields"] == {"mode": ["unknown field"], "user_id": ["unknown field"]}
    chat.refresh_from_db()
    assert chat.meta_version == 1


def test_a_server_managed_chat_takes_no_client_ciphertext_but_pins(
    keyed_owner: Any, chat_instance: Any
) -> None:
    managed = services.server_chat_create(user=keyed_owner, chat_id=_id(), instance=chat_instance)
    message = services.server_message_create(
        chat=managed, message_id=_id(), role="user", content="from the API"
    )
    embed = services.embed_create(chat=managed, embed_id=_id(), tool="calculator")
    client = signed_in_client(keyed_owner)
    url = f"/api/chats/{managed.pk}/"
    version = Chat.objects.get(pk=managed.pk).version

    titled = client.patch(
        url, {"version": version, "encrypted_title": client_envelope()}, format="json"
    )
    stored = client.put(
        f"{url}messages/{message.pk}/",
        {"encrypted_content": client_envelope(), "version": 0},
        format="json",
    )
    embedded = client.put(
        f"{url}embeds/{embed.pk}/",
        {"encrypted_content": client_envelope(), "version": 0},
        format="json",
    )
    pinned = client.patch(url, {"version": version, "pinned": True}, format="json")

    read_only = {"code": "read_only", "message": services.SERVER_MANAGED_READ_ONLY}
    assert [(r.status_code, r.json()) for r in (titled, stored, embedded)] == [(409, read_only)] * 3
    assert pinned.status_code == 200
    assert pinned.json()["pinned"] is True
    row = Chat.objects.get(pk=managed.pk)
    assert (row.encrypted_title, row.meta_version) == (None, 1)
    assert Message.objects.get(pk=message.pk).encrypted_content is None


def test_user_keys_are_stored_wrapped_and_replaced_by_version(keyed_owner: Any) -> None:
    client = signed_in_client(keyed_owner)
    assert client.get("/api/chats/keys/").status_code == 404
    keys: dict[str, Any] = dict(PUT_KEYS)
    weak = {**keys, "kdf": {**keys["kdf"], "iterations": 10_000}}
    refused = client.put("/api/chats/keys/", weak, format="json")
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid"
    assert refused.json()["fields"] == {"kdf": ["PBKDF2 needs at least 600000 iterations"]}
    assert client.put("/api/chats/keys/", keys, format="json").json() == {"version": 1}
    assert client.put("/api/chats/keys/", keys, format="json").status_code == 409
    changed = {**keys, "wrapped_master_key": "BwgJ", "version": 1}
    assert client.put("/api/chats/keys/", changed, format="json").json() == {"version": 2}
    assert client.get("/api/chats/keys/").json()["wrapped_master_key"] == "BwgJ"


def test_replacing_the_keys_needs_the_login_password(keyed_owner: Any) -> None:
    # A stolen cookie or a script in the page must not make every chat unreadable.
    client = signed_in_client(keyed_owner)
    keys: dict[str, Any] = dict(USER_KEYS)
    assert client.put("/api/chats/keys/", {**keys, "password": PASSWORD}, format="json").json() == {
        "version": 1
    }
    hostile = {**keys, "wrapped_master_key": "BwgJ", "version": 1}

    missing = client.put("/api/chats/keys/", hostile, format="json")
    wrong = client.put("/api/chats/keys/", {**hostile, "password": "guess"}, format="json")
    padded = client.put("/api/chats/keys/", {**hostile, "password": f" {PASSWORD}"}, format="json")

    assert missing.status_code == 400
    assert missing.json()["fields"] == {"password": ["This field is required."]}
    assert (wrong.status_code, wrong.json()) == (
        403,
        {"code": "permission_denied", "message": "wrong password"},
    )
    assert padded.status_code == 403
    stored = UserKeys.objects.get(user=keyed_owner)
    assert (stored.wrapped_master_key, stored.version) == ("AQID", 1)


def test_key_replacements_are_throttled_but_reading_them_is_not(keyed_owner: Any) -> None:
    client = signed_in_client(keyed_owner)
    body = {"wrapped_master_key": "AQID", "password": "guess"}
    guesses = [client.put("/api/chats/keys/", body, format="json") for _ in range(5)]
    reads = [client.get("/api/chats/keys/") for _ in range(8)]

    throttled = client.put("/api/chats/keys/", body, format="json")

    assert [g.status_code for g in guesses] == [400] * 5
    assert [r.status_code for r in reads] == [404] * 8
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "throttled"
    assert 1 <= throttled.json()["retry_after"] <= 60


def test_account_deletion_leaves_nothing_decryptable(chat: Chat, keyed_owner: Any) -> None:
    user_id = keyed_owner.pk
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    services.assistant_reply_keep(
        chat=chat, message_id=reply.pk, content="kept reply", model="m", usage=None
    )
    row: Any = Message.objects.get(pk=reply.pk)
    sealed_row = bytes(row.server_content)
    embed_id = _id()
    async_to_sync(cache.ai_history_append)(
        user_id=user_id,
        chat_id=chat.pk,
        message={"message_id": reply.pk, "role": "assistant", "content": "kept reply"},
    )
    async_to_sync(cache.embed_cache_put)(
        user_id=user_id, chat_id=chat.pk, embed_id=embed_id, content={"x": "y"}
    )
    sealed_cache: Any = cache.redis_client().lrange(cache.ai_key(user_id, chat.pk), 0, -1)[0]
    UserKeys.objects.create(
        user=keyed_owner,
        wrapped_master_key="AQ==",
        recovery_wrapped_master_key="Ag==",
        master_key_id="a",
        recovery_key_id="b",
        kdf={"name": "PBKDF2"},
    )
    client = signed_in_client(keyed_owner)
    refused = client.delete("/api/account/", {"password": "wrong"}, format="json")
    assert refused.status_code == 403
    response = client.delete(
        "/api/account/", {"password": "correct horse battery staple"}, format="json"
    )
    assert response.status_code == 204
    assert not get_user_model().objects.filter(pk=user_id).exists()
    assert not Chat.objects.filter(owner_id=user_id).exists()
    assert not Message.objects.filter(pk=reply.pk).exists()
    assert not UserKeys.objects.filter(user_id=user_id).exists()
    redis_client = cache.redis_client()
    assert redis_client.keys(f"user:{user_id}:*") == []
    assert redis_client.exists(cache.embed_key(embed_id)) == 0
    key_name = vault.user_key_name(user_id)
    with pytest.raises(vault.VaultError) as missing:
        vault.key_latest_version(key_name)
    assert missing.value.reason == "not_found"
    crypto.forget_key(key_name)
    with pytest.raises(crypto.DecryptionError):
        services.sealed_text_open(owner_id=user_id, object_id=reply.pk, sealed=sealed_row)
    with pytest.raises(crypto.DecryptionError):
        crypto.open_sealed(
            key_name=key_name,
            purpose="ai-cache",
            owner_id=user_id,
            object_id=chat.pk,
            sealed=sealed_cache,
        )


def test_deleting_a_chat_deletes_its_memory_consent_answers(
    chat: Chat, keyed_owner: Any, chat_instance: Any
) -> None:
    from memories import selectors as memory_selectors
    from memories import services as memory_services

    other = services.chat_create(
        user=keyed_owner, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )
    for kept in (chat, other):
        memory_services.memory_consent_save(
            chat_id=kept.pk, user_id=keyed_owner.pk, answers={"fact": "denied", "x": "denied"}
        )

    response = signed_in_client(keyed_owner).delete(f"/api/chats/{chat.pk}/")

    assert response.status_code == 204
    assert memory_selectors.memory_consent_for_chat(chat_id=chat.pk) == {}
    assert memory_selectors.memory_consent_for_chat(chat_id=other.pk) == {"fact": "denied"}
