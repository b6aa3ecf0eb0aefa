"""chats.sync: three phases, only changed chats, sync cache first, kept replies delivered."""

from __future__ import annotations

import json
import uuid
from typing import Any

from chats import cache, services, sync
from chats.models import Chat, Message

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="


def _id() -> str:
    return str(uuid.uuid4())


def _chats(user: Any, instance: Any, count: int) -> list[Chat]:
    made = []
    for _ in range(count):
        made.append(
            services.chat_create(
                user=user, chat_id=_id(), instance=instance, encrypted_chat_key=CHAT_KEY
            )
        )
    return made


def test_phases_split_1_19_100_newest_first(keyed_owner: Any, chat_instance: Any) -> None:
    chats = _chats(keyed_owner, chat_instance, 122)
    phases = sync.sync_phases(user=keyed_owner, known={})
    assert [len(p) for p in phases] == [1, 19, 100]
    assert phases[0][0]["chat_id"] == chats[-1].pk
    assert [c["chat_id"] for c in phases[1]] == [c.pk for c in chats[-2:-21:-1]]
    assert all("messages" in c for c in phases[0] + phases[1])
    assert all("messages" not in c for c in phases[2])
    assert sync.sync_total_chats(user=keyed_owner) == 122


def test_chats_gone_are_the_known_ids_the_user_has_no_chat_of(
    keyed_owner: Any, chat_instance: Any, django_user_model: Any
) -> None:
    kept, deleted = _chats(keyed_owner, chat_instance, 2)
    other = django_user_model.objects.create_user(username="other", password="x" * 12)
    (foreign,) = _chats(other, chat_instance, 1)
    services.chat_delete(chat=deleted)
    unknown = _id()
    known = {kept.pk: 1, deleted.pk: 1, foreign.pk: 1, unknown: 1}

    assert sync.chats_gone(user=keyed_owner, known=known) == sorted(
        [deleted.pk, foreign.pk, unknown]
    )
    assert sync.chats_gone(user=keyed_owner, known={}) == []


def test_only_chats_whose_version_differs_are_sent(keyed_owner: Any, chat_instance: Any) -> None:
    a, b, c = _chats(keyed_owner, chat_instance, 3)
    services.user_message_accept(chat=a, message_id=_id(), user=keyed_owner)
    known = {a.pk: 1, b.pk: 1, c.pk: 1}
    phases = sync.sync_phases(user=keyed_owner, known=known)
    sent = [chat["chat_id"] for phase in phases for chat in phase]
    assert sent == [a.pk]
    assert phases[0][0]["version"] == 2


def test_messages_come_from_the_sync_cache_when_it_is_current(
    keyed_owner: Any, chat_instance: Any
) -> None:
    (chat,) = _chats(keyed_owner, chat_instance, 1)
    message, _ = services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    services.message_store(chat=chat, message_id=message.pk, encrypted_content="AQI=", version=0)
    chat.refresh_from_db()
    first = sync.sync_phases(user=keyed_owner, known={})[0][0]["messages"]
    assert [m["encrypted_content"] for m in first] == ["AQI="]
    client: Any = cache.redis_client()
    cached = json.loads(client.get(cache.sync_key(keyed_owner.pk, chat.pk)))
    assert cached["version"] == chat.version
    # The cache wins while the chat's version is unchanged: PostgreSQL is not read again.
    Message.objects.filter(pk=message.pk).update(encrypted_content="BQY=")
    again = sync.sync_phases(user=keyed_owner, known={})[0][0]["messages"]
    assert [m["encrypted_content"] for m in again] == ["AQI="]
    # A new version invalidates the cached copy.
    services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    fresh = sync.sync_phases(user=keyed_owner, known={})[0][0]["messages"]
    assert [m["encrypted_content"] for m in fresh] == ["BQY=", None]


def test_an_unstored_reply_survives_a_cache_flush_and_reaches_the_client(
    keyed_owner: Any, chat_instance: Any
) -> None:
    (chat,) = _chats(keyed_owner, chat_instance, 1)
    services.user_message_accept(chat=chat, message_id=_id(), user=keyed_owner)
    reply = services.assistant_message_create(chat=chat, message_id=_id())
    services.assistant_reply_keep(
        chat=chat, message_id=reply.pk, content="the kept answer", model="m", usage=None
    )
    services.message_status_set(message_id=reply.pk, status="done")
    cache.redis_client().flushdb()
    phases = sync.sync_phases(user=keyed_owner, known={})
    delivered = {m["message_id"]: m for m in phases[0][0]["messages"]}
    assert delivered[reply.pk]["content"] == "the kept answer"
    assert delivered[reply.pk]["needs_store"] is True
    # The plaintext went to the client only: the sync cache holds no content.
    raw: Any = cache.redis_client().get(cache.sync_key(keyed_owner.pk, chat.pk))
    assert b"the kept answer" not in raw
    # Once the client stored its ciphertext, the next sync sends ciphertext only.
    services.message_store(chat=chat, message_id=reply.pk, encrypted_content="AQ==", version=0)
    after = {
        m["message_id"]: m for m in sync.sync_phases(user=keyed_owner, known={})[0][0]["messages"]
    }
    assert "content" not in after[reply.pk]
    assert after[reply.pk]["encrypted_content"] == "AQ=="
