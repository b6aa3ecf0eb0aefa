"""Every socket of a user learns of every change to the user's chats (docs/protocol.md
§4, §5): changes made outside a socket (REST create, PATCH, DELETE and message PUT, a
chat the server creates for a ``/v1`` or channel conversation) as the frame a socket's
own change sends, without ``request_id``, and another user's sockets get nothing; a
socket that was away learns at its ``sync.request`` which of its chats are gone."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats import services as chat_services
from openmates.db import db_call
from pipeline import events as ev
from pipeline.ids import new_id
from pipeline.server_turn import _conversation_create
from tests.chats.rest import client_envelope, signed_in_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _rest(user: Any, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """One REST call as ``user``'s browser makes it; returns the response."""

    def call() -> Any:
        client = signed_in_client(user)
        return getattr(client, method)(url, body, format="json")

    return sync_to_async(call)()


async def test_a_rest_patch_sends_chat_updated_to_every_socket_of_the_user(
    ws_client: Any, chat: Any, user: Any, keyed_user_factory: Any
) -> None:
    first, second = await ws_client(user), await ws_client(user)
    stranger = await ws_client(await db_call(keyed_user_factory, "stranger"))

    answer = await _rest(
        user, "patch", f"/api/chats/{chat.pk}/", {"version": chat.version, "pinned": True}
    )

    assert answer.status_code == 200
    expected = ev.ChatUpdated(chat_id=chat.pk, version=answer.json()["version"]).to_frame()
    assert (await first.until("chat.updated"))[-1] == expected
    assert (await second.until("chat.updated"))[-1] == expected
    assert await stranger.nothing(0.5)


async def test_rest_create_delete_and_message_store_send_their_frames(
    ws_client: Any, chat: Any, user: Any, instance: Any
) -> None:
    socket = await ws_client(user)
    chat_id = new_id()
    created = await _rest(
        user,
        "post",
        "/api/chats/",
        {"chat_id": chat_id, "instance": instance.slug, "encrypted_chat_key": client_envelope()},
    )
    assert created.status_code == 201
    assert (await socket.until("chat.created"))[-1] == {
        "type": "chat.created",
        "chat_id": chat_id,
        "version": created.json()["version"],
    }

    message_id = new_id()
    await db_call(chat_services.user_message_accept, chat=chat, message_id=message_id, user=user)
    stored = await _rest(
        user,
        "put",
        f"/api/chats/{chat.pk}/messages/{message_id}/",
        {"encrypted_content": client_envelope(), "version": 0},
    )
    assert stored.status_code == 200
    assert (await socket.until("message.stored"))[-1] == {
        "type": "message.stored",
        "chat_id": chat.pk,
        "message_id": message_id,
        "version": stored.json()["version"],
    }

    version = created.json()["version"]
    assert (await _rest(user, "delete", f"/api/chats/{chat_id}/")).status_code == 204
    assert (await socket.until("chat.deleted"))[-1] == {
        "type": "chat.deleted",
        "chat_id": chat_id,
        "version": version + 1,
    }


async def test_a_chat_the_server_creates_for_a_conversation_reaches_the_users_sockets(
    ws_client: Any, user: Any, instance: Any
) -> None:
    socket = await ws_client(user)

    chat, _ = await db_call(
        _conversation_create,
        instance=instance,
        user_id=user.pk,
        history=[{"role": "user", "content": "Earlier question"}],
    )

    assert (await socket.until("chat.created"))[-1] == {
        "type": "chat.created",
        "chat_id": chat.pk,
        "version": chat.version,
    }


async def test_sync_done_names_the_known_chats_that_are_gone(
    ws_client: Any, chat_factory: Any, user: Any, keyed_user_factory: Any
) -> None:
    kept, deleted = await db_call(chat_factory, user), await db_call(chat_factory, user)
    foreign = await db_call(chat_factory, await db_call(keyed_user_factory, "stranger"))
    await db_call(chat_services.chat_delete, chat=deleted)
    never = new_id()
    socket = await ws_client(user)

    await socket.send(
        type="sync.request",
        known={kept.pk: kept.version, deleted.pk: 1, foreign.pk: 1, never: 1},
    )

    done = (await socket.until("sync.done"))[-1]
    assert done == {
        "type": "sync.done",
        "total_chats": 0,
        "deleted": sorted([deleted.pk, foreign.pk, never]),
    }
    await socket.send(type="sync.request", known={kept.pk: kept.version})
    assert (await socket.until("sync.done"))[-1]["deleted"] == []
