"""A server-managed chat (/v1, a channel) over the WebSocket: readable, pinnable and
deletable, but no turn, no client ciphertext and no encrypted metadata (``read_only``)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats import services
from chats.models import Chat, Message
from pipeline.ids import new_id
from tests.pipeline.conftest import envelope

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def managed(instance: Any, user: Any) -> tuple[Chat, str, str]:
    """A server-managed chat with one answered exchange: (chat, question id, answer id)."""
    chat = services.server_chat_create(user=user, chat_id=new_id(), instance=instance)
    question = services.server_message_create(
        chat=chat, message_id=new_id(), role="user", content="hello from the API"
    )
    answer = services.server_message_create(
        chat=chat, message_id=new_id(), role="assistant", content="hello back"
    )
    return Chat.objects.get(pk=chat.pk), question.pk, answer.pk


def _count(chat: Chat) -> int:
    return Message.objects.filter(chat_id=chat.pk).count()


async def _refused(client: Any, **frame: Any) -> dict[str, Any]:
    await client.send(**frame)
    error = await client.recv()
    assert error["type"] == "error", error
    assert await client.nothing()  # no turn frames, no request_chat_history
    return error


async def test_no_turn_runs_in_a_server_managed_chat(ws_client, managed, user, llm_script):
    chat, question, answer = managed
    client = await ws_client(user)
    message_id = new_id()

    sent = await _refused(
        client, type="message.send", chat_id=chat.pk, message_id=message_id, content="Go on"
    )
    retried = await _refused(client, type="message.retry", chat_id=chat.pk, message_id=question)
    regenerated = await _refused(
        client, type="message.regenerate", chat_id=chat.pk, message_id=answer, content="hi"
    )

    assert sent == {
        "type": "error",
        "code": "read_only",
        "message": services.SERVER_MANAGED_READ_ONLY,
        "chat_id": chat.pk,
        "message_id": message_id,
    }
    assert (retried["code"], retried["chat_id"], retried["message_id"]) == (
        "read_only",
        chat.pk,
        question,
    )
    assert (regenerated["code"], regenerated["chat_id"], regenerated["message_id"]) == (
        "read_only",
        chat.pk,
        answer,
    )
    assert await sync_to_async(_count)(chat) == 2
    assert llm_script.requests == []


async def test_message_store_in_a_server_managed_chat_is_read_only_not_internal(
    ws_client, managed, user
):
    chat, question, _answer = managed
    client = await ws_client(user)

    error = await _refused(
        client,
        type="message.store",
        chat_id=chat.pk,
        message_id=question,
        encrypted_content=envelope(),
        version=0,
    )

    assert (error["code"], error["chat_id"], error["message_id"]) == (
        "read_only",
        chat.pk,
        question,
    )
    row = await sync_to_async(Message.objects.get)(pk=question)
    assert (row.encrypted_content, row.version) == (None, 0)


async def test_a_server_managed_chat_takes_pinning_but_no_encrypted_title(ws_client, managed, user):
    chat, _question, _answer = managed
    client = await ws_client(user)

    titled = await _refused(
        client,
        type="chat.update",
        request_id="title-1",
        chat_id=chat.pk,
        version=chat.version,
        encrypted_title=envelope(),
    )
    await client.send(
        type="chat.update", request_id="pin-1", chat_id=chat.pk, version=chat.version, pinned=True
    )
    pinned = await client.recv()

    assert (titled["code"], titled["chat_id"], titled["request_id"]) == (
        "read_only",
        chat.pk,
        "title-1",
    )
    assert (pinned["type"], pinned["request_id"]) == ("chat.updated", "pin-1")
    stored = await sync_to_async(Chat.objects.get)(pk=chat.pk)
    assert (stored.pinned, stored.encrypted_title, stored.meta_version) == (True, None, 1)
