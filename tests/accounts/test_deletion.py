"""Account deletion: one service (``accounts.services.account_delete``) for the account
page, ``DELETE /api/account/`` and the admin; each app's part through
``accounts.deletion``."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from accounts import deletion, services
from chats import cache
from chats import services as chat_services
from chats.models import Chat, Message, MessageStatus
from openmates import vault
from pipeline.ids import new_id
from tests.chats.rest import client_envelope, signed_in_client
from tests.factories import UserFactory


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _chat(user: Any, instance: Any) -> Chat:
    return chat_services.chat_create(
        user=user, chat_id=new_id(), instance=instance, encrypted_chat_key=client_envelope()
    )


def _key_exists(user_id: int) -> bool:
    try:
        vault.key_latest_version(vault.user_key_name(user_id))
    except vault.VaultError as exc:
        if exc.reason == "not_found":
            return False
        raise
    return True


def test_account_delete_drops_the_pipelines_chat_notes_and_kept_texts(
    keyed_owner: Any, chat_instance: Any
) -> None:
    chat = _chat(keyed_owner, chat_instance)
    answered, _ = chat_services.user_message_accept(
        chat=chat, message_id=new_id(), user=keyed_owner
    )
    chat_services.message_status_set(message_id=answered.pk, status=MessageStatus.DONE)
    unanswered, _ = chat_services.user_message_accept(
        chat=chat, message_id=new_id(), user=keyed_owner
    )
    redis = cache.redis_client()
    notes = cache.chat_notes_key(chat.pk)
    kept = cache.pending_text_key(unanswered.pk)
    other_kept = cache.pending_text_key(new_id())  # someone else's message
    for key in (notes, kept, other_kept):
        redis.set(key, b"sealed", ex=60)

    services.account_delete(user=keyed_owner)

    assert redis.exists(notes, kept) == 0
    assert redis.exists(other_kept) == 1
    assert not Message.objects.filter(chat_id=chat.pk).exists()
    redis.delete(other_kept)


class _FailingPart:
    name = "failing-test-part"

    def __init__(self) -> None:
        self.called_with: list[int] = []

    def account_data_delete(self, *, user_id: int) -> None:
        self.called_with.append(user_id)
        raise RuntimeError("this app's part failed")


@pytest.fixture
def failing_part() -> Iterator[_FailingPart]:
    part = _FailingPart()
    deletion.account_data_owner_register(part)
    yield part
    deletion._owners.pop(part.name)


def test_a_failing_app_part_leaves_the_user_row_in_place(
    keyed_owner: Any, chat_instance: Any, failing_part: _FailingPart
) -> None:
    chat = _chat(keyed_owner, chat_instance)

    with pytest.raises(RuntimeError, match="this app's part failed"):
        services.account_delete(user=keyed_owner)

    assert failing_part.called_with == [keyed_owner.pk]
    assert get_user_model().objects.filter(pk=keyed_owner.pk).exists()
    assert Chat.objects.filter(pk=chat.pk).exists()
    # The key went first: what was sealed before no longer opens (crypto-shred).
    assert not _key_exists(keyed_owner.pk)


def test_chats_takes_part_in_account_deletion() -> None:
    assert "chats" in [owner.name for owner in deletion.account_data_owners()]


def test_another_part_under_a_taken_name_is_refused() -> None:
    class Impostor:
        name = "chats"

        def account_data_delete(self, *, user_id: int) -> None:
            raise AssertionError("never called")

    with pytest.raises(ValueError, match="'chats' is already registered"):
        deletion.account_data_owner_register(Impostor())


def test_rest_deletion_answers_503_and_deletes_nothing_when_vault_is_down(
    keyed_owner: Any, closed_port: int
) -> None:
    client = signed_in_client(keyed_owner)

    with override_settings(VAULT_ADDR=f"http://127.0.0.1:{closed_port}", VAULT_TIMEOUT_S=1.0):
        response = client.delete(
            "/api/account/", {"password": "correct horse battery staple"}, format="json"
        )

    assert response.status_code == 503
    assert response.json() == {
        "code": "vault_unavailable",
        "message": "the key service is unavailable",
    }
    assert get_user_model().objects.filter(pk=keyed_owner.pk).exists()
    assert _key_exists(keyed_owner.pk)


@pytest.mark.django_db(transaction=True)
def test_deleting_a_user_in_the_admin_shreds_the_key_and_drops_the_caches(
    client: Client, chat_instance: Any
) -> None:
    root: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    user: Any = UserFactory(username="leaving")
    services.user_transit_key_ensure(user_id=user.pk)
    chat = _chat(user, chat_instance)
    redis = cache.redis_client()
    redis.set(cache.chat_notes_key(chat.pk), b"sealed", ex=60)
    client.force_login(root)

    response = client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert not _key_exists(user.pk)
    assert redis.exists(cache.chat_notes_key(chat.pk)) == 0


@pytest.mark.django_db(transaction=True)
def test_the_admins_bulk_delete_is_an_account_deletion_for_each_user(client: Client) -> None:
    root: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    users: list[Any] = [UserFactory(username=f"leaving{n}") for n in range(2)]
    for user in users:
        services.user_transit_key_ensure(user_id=user.pk)
    client.force_login(root)

    response = client.post(
        "/admin/auth/user/",
        {
            "action": "delete_selected",
            "_selected_action": [u.pk for u in users],
            "post": "yes",
        },
    )

    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk__in=[u.pk for u in users]).exists()
    assert [_key_exists(u.pk) for u in users] == [False, False]
