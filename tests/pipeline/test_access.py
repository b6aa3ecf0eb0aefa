"""Who may start or continue a turn over /ws/chat/, and what a chat's deletion stops
(real PostgreSQL, Redis, OpenBao; scripted model)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from chats import cache as chat_cache
from chats import services as chat_services
from chats.models import Chat, Message
from instances.models import InstanceMember
from pipeline import state
from pipeline.ids import new_id
from tests.pipeline.conftest import envelope

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Chat", "icon": "chat", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
SLOW_PIECES = [f"word{n} " for n in range(200)]


@pytest.fixture
def member(instance: Any, keyed_user_factory: Any) -> Any:
    """A plain member of the test instance (with a transit key)."""
    user = keyed_user_factory("mia")
    InstanceMember.objects.create(instance=instance, user=user, role="member")
    return user


@pytest.fixture(autouse=True)
def _fresh_sign_in_checks(settings: Any) -> None:
    # Every frame looks the sign-in up again: the tests change it between frames.
    settings.WS_SIGN_IN_RECHECK_S = 0


def _membership_end(user: Any) -> None:
    InstanceMember.objects.filter(user=user).delete()


async def _message_rows(chat: Any) -> list[tuple[str, str]]:
    return sorted([(m.role, m.status) async for m in Message.objects.filter(chat_id=chat.pk)])


def _answered_exchange(chat: Any, user: Any) -> None:
    """A finished exchange the server knows only by its rows (its AI cache is empty)."""
    old_user, old_reply = new_id(), new_id()
    chat_services.user_message_accept(chat=chat, message_id=old_user, user=user)
    chat_services.message_status_set(message_id=old_user, status="done")
    chat_services.assistant_message_create(chat=chat, message_id=old_reply)
    chat_services.message_status_set(message_id=old_reply, status="done")


def _history(user_text: str = "Capital of France?") -> list[dict[str, str]]:
    return [
        {"message_id": new_id(), "role": "user", "content": user_text},
        {"message_id": new_id(), "role": "assistant", "content": "Paris."},
    ]


async def _chat_keys(chat_id: str) -> list[str]:
    """Every Redis key naming the chat (its deletion mark aside)."""
    client = state.redis_client()
    keys = [k.decode() async for k in client.scan_iter(match=f"*{chat_id}*")]
    return sorted(k for k in keys if not k.endswith(f"{chat_id}:deleted"))


# --- membership ----------------------------------------------------------------------


async def test_a_removed_member_cannot_send_or_retry_in_an_old_chat_but_still_reads_it(
    ws_client, chat_factory, member, llm_script
):
    chat = await sync_to_async(chat_factory)(member)
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Hello.", model="standard", error=400)
    client = await ws_client(member)
    failed = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=failed, content="Tell me about the sea"
    )
    first = await client.until("stream.done")
    assert first[-1]["status"] == "failed", first
    await sync_to_async(_membership_end)(member)
    llm_script.requests.clear()

    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Hi?")
    refused = await client.until("error")
    await client.send(type="message.retry", chat_id=chat.pk, message_id=failed)
    refused += await client.until("error")

    errors = [f for f in refused if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["forbidden", "forbidden"]
    assert all(e["chat_id"] == chat.pk for e in errors)
    assert errors[1]["message_id"] == failed
    assert "read-only" in errors[0]["message"]
    assert llm_script.requests == []
    assert await _message_rows(chat) == [("assistant", "failed"), ("user", "failed")]
    # The chat and its messages are still the user's to read.
    await client.send(type="sync.request", known={})
    phases = await client.until("sync.done")
    synced = [c for f in phases if f["type"] == "sync.phase" for c in f["chats"]]
    assert [c["chat_id"] for c in synced] == [chat.pk]
    assert len(synced[0]["messages"]) == 2


async def test_a_history_answer_of_a_removed_member_is_refused_and_cancels_the_waiting_turn(
    ws_client, chat_factory, member, llm_script
):
    chat = await sync_to_async(chat_factory)(member)
    await sync_to_async(_answered_exchange)(chat, member)
    client = await ws_client(member)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="More?")
    asked = (await client.until("request_chat_history"))[-1]
    await sync_to_async(_membership_end)(member)

    await client.send(
        type="chat.history", chat_id=chat.pk, request_id=asked["request_id"], messages=_history()
    )
    frames = await client.until("task.cancelled")

    error = next(f for f in frames if f["type"] == "error")
    assert (error["code"], error["request_id"]) == ("forbidden", asked["request_id"])
    done = next(f for f in frames if f["type"] == "stream.done")
    assert (done["status"], done["content"]) == ("cancelled", "")
    assert llm_script.requests == []
    assert await chat_cache.ai_history_load(
        user_id=member.pk, chat_id=chat.pk, expected_done_count=2
    ) == chat_cache.HistoryResult(messages=None, reason="cache_miss")


async def test_a_wrong_history_answer_leaves_the_request_for_the_right_one(
    ws_client, chat, chat_factory, user, llm_script
):
    other_chat = await sync_to_async(chat_factory)(user)
    await sync_to_async(_answered_exchange)(chat, user)
    llm_script.reply(text="Still Paris.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Sure?")
    asked = (await client.until("request_chat_history"))[-1]

    await client.send(
        type="chat.history",
        chat_id=other_chat.pk,
        request_id=asked["request_id"],
        messages=_history(),
    )
    wrong = (await client.until("error"))[-1]
    await client.send(
        type="chat.history", chat_id=chat.pk, request_id=asked["request_id"], messages=_history()
    )
    frames = await client.until("stream.done", wait_s=15)

    assert (wrong["code"], wrong["chat_id"]) == ("not_found", other_chat.pk)
    assert frames[-1]["status"] == "done"
    assert frames[-1]["content"] == "Still Paris."
    assert not [f for f in frames if f["type"] == "error"]


# --- chat deletion -------------------------------------------------------------------


async def _streaming_turn(client: Any, chat: Any, llm_script: Any) -> dict[str, Any]:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=SLOW_PIECES, delay_s=0.05, model="standard")
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    frames = await client.until("stream.delta")
    return frames[0]


async def test_deleting_a_chat_cancels_its_turn_and_leaves_nothing_of_it_in_redis(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    accepted = await _streaming_turn(client, chat, llm_script)

    await client.send(type="chat.delete", chat_id=chat.pk, request_id="del-1")
    frames = await client.until("task.cancelled")

    assert any(f["type"] == "chat.deleted" and f["chat_id"] == chat.pk for f in frames)
    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["task_id"] == accepted["task_id"]
    assert done["status"] == "cancelled"
    assert "word199" not in done["content"]
    assert not [f for f in frames if f["type"] == "error"]
    assert await client.nothing(0.5)
    assert await _chat_keys(chat.pk) == []
    assert await state.snapshot_load(user_id=user.pk, task_id=accepted["task_id"]) is None
    assert await chat_cache.ai_cached_chat_ids(user_id=user.pk) == []
    assert not await Chat.objects.filter(pk=chat.pk).aexists()


async def test_a_chat_deleted_through_rest_stops_its_turn_at_the_next_heartbeat(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    accepted = await _streaming_turn(client, chat, llm_script)

    # What DELETE /api/chats/<id>/ calls: no socket is told, the deletion mark is.
    await sync_to_async(chat_services.chat_delete)(chat=chat)
    frames = await client.until("task.cancelled")

    done = next(f for f in frames if f["type"] == "stream.done")
    assert (done["task_id"], done["status"]) == (accepted["task_id"], "cancelled")
    assert not [f for f in frames if f["type"] == "error"]
    assert await _chat_keys(chat.pk) == []


async def test_a_queued_turn_of_a_deleted_chat_ends_cancelled_without_keeping_its_text(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    first = await _streaming_turn(client, chat, llm_script)
    queued_id = new_id()
    await client.send(type="message.send", chat_id=chat.pk, message_id=queued_id, content="Next")
    queued = (await client.until("task.queued"))[-1]

    await client.send(type="chat.delete", chat_id=chat.pk)
    ended: set[str] = set()
    frames: list[dict[str, Any]] = []
    while ended != {first["task_id"], queued["task_id"]}:
        frames.append(await client.recv())
        if frames[-1]["type"] == "task.cancelled":
            ended.add(frames[-1]["task_id"])

    statuses = {f["task_id"]: f["status"] for f in frames if f["type"] == "stream.done"}
    assert statuses == {first["task_id"]: "cancelled", queued["task_id"]: "cancelled"}
    assert await state.pending_content_load(user_id=user.pk, message_id=queued_id) is None
    assert await _chat_keys(chat.pk) == []


async def test_a_late_history_answer_for_a_deleted_chat_stores_nothing(
    ws_client, chat, user, llm_script
):
    await sync_to_async(_answered_exchange)(chat, user)
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="More?")
    asked = (await client.until("request_chat_history"))[-1]
    await client.send(type="chat.delete", chat_id=chat.pk)
    await client.until("task.cancelled")

    await client.send(
        type="chat.history", chat_id=chat.pk, request_id=asked["request_id"], messages=_history()
    )
    error = (await client.until("error"))[-1]

    assert error["code"] == "not_found"
    assert await _chat_keys(chat.pk) == []


# --- sign-in -------------------------------------------------------------------------


async def test_a_user_deactivated_by_a_queryset_update_cannot_start_a_turn(
    ws_client, chat, user, llm_script
):
    # update() sends no post_save: only the socket's own re-check notices.
    client = await ws_client(user)
    await sync_to_async(get_user_model().objects.filter(pk=user.pk).update)(is_active=False)

    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Hi")
    closed = await client.communicator.receive_output(timeout=5)

    assert closed == {"type": "websocket.close", "code": 4401}
    assert await _message_rows(chat) == []
    assert llm_script.requests == []


async def test_an_idle_socket_of_a_deactivated_user_closes_at_its_next_check(
    ws_client, user, settings
):
    settings.PIPELINE_GROUP_REJOIN_S = 0.2
    client = await ws_client(user)
    await sync_to_async(get_user_model().objects.filter(pk=user.pk).update)(is_active=False)

    closed = await client.communicator.receive_output(timeout=5)

    assert closed == {"type": "websocket.close", "code": 4401}


async def test_a_socket_hears_other_tabs_turns_again_after_redis_lost_its_groups(
    ws_client, chat, user, llm_script, settings
):
    settings.PIPELINE_GROUP_REJOIN_S = 0.3
    sender = await ws_client(user)
    listener = await ws_client(user)
    await state.redis_client().flushdb()
    await asyncio.sleep(1.0)  # past every socket's re-join
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=["Heard ", "again."], model="standard")
    llm_script.reply(text=POST, model="fast")

    await sender.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Tell me about the sea"
    )
    sent = await sender.until("stream.done")
    heard = await listener.until("stream.done")

    assert heard[-1]["task_id"] == sent[-1]["task_id"]
    assert heard[-1]["content"] == sent[-1]["content"] == "Heard again."


async def test_chat_create_of_a_signed_out_session_closes_the_socket(ws_client, user, instance):
    client = await ws_client(user)
    # The session row goes, as sign-out does, but the closing event is lost.
    await state.redis_client().flushdb()
    await sync_to_async(_sessions_end)(user)

    await client.send(
        type="chat.create",
        request_id="c-1",
        chat_id=new_id(),
        instance=instance.slug,
        encrypted_chat_key=envelope(),
    )
    closed = await client.communicator.receive_output(timeout=5)

    assert closed == {"type": "websocket.close", "code": 4401}
    assert not await Chat.objects.filter(owner_id=user.pk).aexists()


def _sessions_end(user: Any) -> None:
    from django.contrib.sessions.models import Session

    for session in Session.objects.all():
        if session.get_decoded().get("_auth_user_id") == str(user.pk):
            session.delete()


def _session_key(client: Any) -> str:
    cookies = dict(client.communicator.scope["headers"])[b"cookie"].decode()
    return cookies.split("=", 1)[1]


async def test_signing_out_closes_the_sockets_of_that_session_only(ws_client, user):
    from channels.layers import get_channel_layer

    from accounts.services import session_socket_group

    signed_out, other_device = await ws_client(user), await ws_client(user)
    # What the sign-out of the first session publishes (accounts.services.user_sign_out).
    await get_channel_layer().group_send(
        session_socket_group(_session_key(signed_out)), {"type": "session.ended", "code": 4401}
    )

    closed = await signed_out.communicator.receive_output(timeout=5)
    await other_device.send(type="ping", ts=1)

    assert closed == {"type": "websocket.close", "code": 4401}
    assert (await other_device.recv())["type"] == "pong"
