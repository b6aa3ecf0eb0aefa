"""chats.services: client ids, compare-and-set versions, kept replies, server-managed chats."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chats import selectors, services
from chats.models import Chat, ChatMode, Message, MessageStatus
from openmates import crypto, vault

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="


def _id() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=keyed_owner, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


def test_chat_create_starts_at_version_one_and_repeats_idempotently(
    chat: Chat, keyed_owner: Any, chat_instance: Any
) -> None:
    assert (chat.version, chat.meta_version, chat.mode) == (1, 1, ChatMode.CLIENT_ENCRYPTED)
    again = services.chat_create(
        user=keyed_owner, chat_id=chat.pk, instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )
    assert again.pk == chat.pk
    assert Chat.objects.filter(pk=chat.pk).count() == 1


def test_a_chat_id_of_another_user_is_refused(
    chat: Chat, stranger: Any, chat_instance: Any
) -> None:
    with pytest.raises(services.IdInUse):
        services.chat_create(
            user=stranger, chat_id=chat.pk, instance=chat_instance, encrypted_chat_key=CHAT_KEY
        )
    assert selectors.chat_get_for_user(chat_id=chat.pk, user=stranger) is None


def test_a_turn_records_both_messages_in_one_step_with_consecutive_versions(
    chat: Chat, keyed_owner: Any
) -> None:
    user_id, reply_id = _id(), _id()
    assert services.turn_accept(
        chat=chat, user=keyed_owner, message_id=user_id, assistant_message_id=reply_id
    )
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.version, stored.message_count) == (chat.version + 2, 2)
    rows = {m.pk: m for m in Message.objects.filter(chat=chat)}
    assert (rows[user_id].role, rows[reply_id].role) == ("user", "assistant")
    assert (rows[user_id].chat_version, rows[reply_id].chat_version) == (
        chat.version + 1,
        chat.version + 2,
    )
    assert {m.status for m in rows.values()} == {MessageStatus.PENDING}
    # The same user message again starts nothing: no new rows, no version change.
    assert not services.turn_accept(
        chat=chat, user=keyed_owner, message_id=user_id, assistant_message_id=_id()
    )
    assert Message.objects.filter(chat=chat).count() == 2
    assert Chat.objects.get(pk=chat.pk).version == chat.version + 2


def test_a_turn_with_a_taken_or_foreign_id_is_refused_and_writes_nothing(
    chat: Chat, keyed_owner: Any, stranger: Any
) -> None:
    taken = _id()
    services.user_message_accept(chat=chat, message_id=taken, user=keyed_owner)
    before = Chat.objects.get(pk=chat.pk).version
    with pytest.raises(services.IdInUse):
        services.turn_accept(
            chat=chat, user=keyed_owner, message_id=_id(), assistant_message_id=taken
        )
    with pytest.raises(services.NotFound):
        services.turn_accept(chat=chat, user=stranger, message_id=_id(), assistant_message_id=_id())
    assert Message.objects.filter(chat=chat).count() == 1
    assert Chat.objects.get(pk=chat.pk).version == before


def test_the_same_message_id_twice_gives_one_message(chat: Chat, keyed_owner: Any) -> None:
    message_id = _id()
    first, created_first = services.user_message_accept(
        chat=chat, message_id=message_id, user=keyed_owner
    )
    second, created_second = services.user_message_accept(
        chat=chat, message_id=message_id, user=keyed_owner
    )
    assert (created_first, created_second) == (True, False)
    assert first.pk == second.pk
    assert Message.objects.filter(chat=chat).count() == 1
    assert Chat.objects.get(pk=chat.pk).message_count == 1


def test_a_message_id_used_in_another_chat_is_refused(
    chat: Chat, keyed_owner: Any, chat_instance: Any
) -> None:
    message_id = _id()
    services.user_message_accept(chat=chat, message_id=message_id, user=keyed_owner)
    other = services.chat_create(
        user=keyed_owner, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )
    with pytest.raises(services.IdInUse):
        services.user_message_accept(chat=other, message_id=message_id, user=keyed_owner)


def test_a_stale_message_version_is_a_conflict(chat: Chat, keyed_owner: Any) -> None:
    message, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    stored = services.message_store(
        chat=chat, message_id=message.pk, encrypted_content="AQ==", version=0
    )
    assert stored.version == 1
    # The same store again (a retried frame) is a no-op, not a conflict.
    assert (
        services.message_store(
            chat=chat, message_id=message.pk, encrypted_content="AQ==", version=0
        ).version
        == 1
    )
    with pytest.raises(services.VersionConflict) as caught:
        services.message_store(
            chat=chat, message_id=message.pk, encrypted_content="Ag==", version=0
        )
    assert caught.value.current_version == 1
    assert Message.objects.get(pk=message.pk).encrypted_content == "AQ=="


def test_chat_update_is_compare_and_set_on_the_metadata_version(chat: Chat) -> None:
    updated = services.chat_update(chat=chat, version=1, encrypted_title="VGl0bGU=")
    assert (updated.version, updated.meta_version) == (2, 2)
    with pytest.raises(services.VersionConflict):
        services.chat_update(chat=chat, version=1, encrypted_title="T2xk")
    assert Chat.objects.get(pk=chat.pk).encrypted_title == "VGl0bGU="


def test_messages_do_not_make_a_metadata_update_conflict(chat: Chat, keyed_owner: Any) -> None:
    services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    current = Chat.objects.get(pk=chat.pk)
    assert current.version == 2
    updated = services.chat_update(chat=current, version=1, encrypted_title="VA==")
    assert updated.meta_version == 2
    assert updated.version == 3


def test_a_kept_reply_is_server_encrypted_until_the_client_stores_it(chat: Chat) -> None:
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    services.assistant_reply_keep(
        chat=chat,
        message_id=reply.pk,
        content="the reply text",
        model="fake/model",
        usage={"prompt_tokens": 3, "completion_tokens": 4},
    )
    row = Message.objects.get(pk=reply.pk)
    assert row.server_content is not None
    assert b"the reply text" not in bytes(row.server_content)
    assert (
        services.sealed_text_open(
            owner_id=chat.owner_id, object_id=reply.pk, sealed=row.server_content
        )
        == "the reply text"
    )
    assert (row.model, row.prompt_tokens, row.completion_tokens) == ("fake/model", 3, 4)
    services.message_store(chat=chat, message_id=reply.pk, encrypted_content="AQID", version=0)
    row = Message.objects.get(pk=reply.pk)
    assert row.server_content is None
    assert row.encrypted_content == "AQID"


def test_a_user_message_is_kept_only_while_its_client_has_not_stored_it(
    chat: Chat, keyed_owner: Any
) -> None:
    stored_id, unstored_id = _id(), _id()
    for message_id in (stored_id, unstored_id):
        services.user_message_accept(chat=chat, message_id=message_id, user=keyed_owner)
    services.message_store(chat=chat, message_id=stored_id, encrypted_content="AQID", version=0)
    before = Chat.objects.get(pk=chat.pk).version

    assert not services.user_message_keep(chat=chat, message_id=stored_id, content="mine")
    assert services.user_message_keep(chat=chat, message_id=unstored_id, content="lost text")

    assert Message.objects.get(pk=stored_id).server_content is None
    row = Message.objects.get(pk=unstored_id)
    assert (
        services.sealed_text_open(
            owner_id=chat.owner_id, object_id=unstored_id, sealed=row.server_content or b""
        )
        == "lost text"
    )
    assert row.chat_version == Chat.objects.get(pk=chat.pk).version == before + 1
    services.message_store(chat=chat, message_id=unstored_id, encrypted_content="AQIE", version=0)
    row = Message.objects.get(pk=unstored_id)
    assert (row.server_content, row.encrypted_content, row.version) == (None, "AQIE", 1)


def test_message_status_set_moves_a_message_and_the_chat_version(chat: Chat) -> None:
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    before = Chat.objects.get(pk=chat.pk).version
    services.message_status_set(message_id=reply.pk, status=MessageStatus.DONE)
    assert Message.objects.get(pk=reply.pk).status == "done"
    assert Chat.objects.get(pk=chat.pk).version == before + 1
    assert selectors.chat_done_message_count(chat_id=chat.pk) == 1
    with pytest.raises(ValueError, match="unknown message status"):
        services.message_status_set(message_id=reply.pk, status="finished")


def test_server_managed_chats_keep_content_sealed(keyed_owner: Any, chat_instance: Any) -> None:
    chat = services.server_chat_create(user=keyed_owner, chat_id=_id(), instance=chat_instance)
    message = services.server_message_create(
        chat=chat, message_id=_id(), role="user", content="hello from telegram"
    )
    row: Any = Message.objects.get(pk=message.pk)
    assert row.encrypted_content is None
    assert b"hello from telegram" not in bytes(row.server_content)
    assert (
        services.sealed_text_open(
            owner_id=chat.owner_id, object_id=message.pk, sealed=row.server_content
        )
        == "hello from telegram"
    )
    with pytest.raises(services.ReadOnlyChat, match="kept by the server"):
        services.message_store(
            chat=chat, message_id=message.pk, encrypted_content="AQ==", version=0
        )


def test_messages_since_returns_only_later_changes(chat: Chat, keyed_owner: Any) -> None:
    first, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    mark = Chat.objects.get(pk=chat.pk).version
    second, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    assert [m.pk for m in selectors.messages_since(chat=chat, version=0)] == [first.pk, second.pk]
    assert [m.pk for m in selectors.messages_since(chat=chat, version=mark)] == [second.pk]


def test_sealed_rows_are_rewrapped_after_a_rotation(keyed_owner: Any, chat_instance: Any) -> None:
    chat = services.server_chat_create(user=keyed_owner, chat_id=_id(), instance=chat_instance)
    message = services.server_message_create(
        chat=chat, message_id=_id(), role="user", content="before rotation"
    )
    services.server_chat_title_set(chat=chat, title="a title")
    key_name = vault.user_key_name(keyed_owner.pk)
    assert vault.rotate_key(key_name) == 2
    crypto.forget_key(key_name)
    assert services.user_sealed_rewrap(user_id=keyed_owner.pk) == 2
    row: Any = Message.objects.get(pk=message.pk)
    assert crypto.sealed_key_version(bytes(row.server_content)) == 2
    assert (
        services.sealed_text_open(
            owner_id=keyed_owner.pk, object_id=message.pk, sealed=row.server_content
        )
        == "before rotation"
    )
    assert services.user_sealed_rewrap(user_id=keyed_owner.pk) == 0
