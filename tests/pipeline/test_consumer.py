"""Event sequences over /ws/chat/ with the real stack (PostgreSQL, Redis, OpenBao) and a
scripted model at the LiteLLM boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats.models import Message
from pipeline.ids import new_id
from tests.pipeline.conftest import envelope

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = (
    '{"title": "Capital of France", "icon": "globe", "category": "geography", "tags": ["france"]}'
)
POST = '{"follow_ups": ["And of Italy?"], "topic_changed": false, "summary": "Asked about Paris."}'


@pytest.fixture
def user(keyed_user_factory: Any, owner: Any) -> Any:
    from openmates import vault

    vault.ensure_key(vault.user_key_name(owner.pk))
    return owner


@pytest.fixture
def chat(chat_factory: Any, user: Any) -> Any:
    return chat_factory(user)


def _types(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


def _text(frames: list[dict[str, Any]]) -> str:
    return "".join(f["delta"] for f in frames if f["type"] == "stream.delta")


async def _status(message_id: str) -> str:
    return await sync_to_async(lambda: Message.objects.get(pk=message_id).status)()


async def test_first_message_streams_before_its_title_arrives(ws_client, chat, user, llm_script):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast", delay_s=0.4)
    llm_script.reply(text=["The capital ", "of France ", "is Paris."], model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=message_id,
        content="What is the capital of France?",
    )
    frames = await client.until("postprocess.done")
    kinds = _types(frames)
    assert kinds[0] == "message.accepted"
    assert kinds[1] == "preprocess.done"
    assert "title" not in frames[1]
    first_delta = kinds.index("stream.delta")
    title_at = next(i for i, f in enumerate(frames) if f.get("title") == "Capital of France")
    assert first_delta < title_at < kinds.index("stream.done")
    assert frames[title_at]["tags"] == ["france"]
    done = frames[kinds.index("stream.done")]
    assert done["status"] == "done"
    assert done["content"] == "The capital of France is Paris." == _text(frames)
    assert done["usage"] == {"prompt_tokens": 12, "completion_tokens": 7}
    post = frames[-1]
    assert post["follow_ups"] == ["And of Italy?"]
    assert post["summary"] == "Asked about Paris."
    accepted = frames[0]
    assert accepted["message_id"] == message_id
    assert await _status(message_id) == "done"
    assert await _status(accepted["assistant_message_id"]) == "done"
    sequences = [f["sequence"] for f in frames if f["type"] == "stream.delta"]
    assert sequences == list(range(1, len(sequences) + 1))


async def test_follow_up_uses_cached_history_without_a_model_call_before_the_main_one(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Paris.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="What is the capital of France?",
    )
    await client.until("postprocess.done")
    llm_script.requests.clear()
    llm_script.reply(text="Rome.", model="standard")
    llm_script.reply(text=POST, model="fast")
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="And the capital of Italy?",
    )
    frames = await client.until("postprocess.done")
    assert _types(frames)[:2] == ["message.accepted", "preprocess.done"]
    assert _text(frames) == "Rome."
    assert [r.model for r in llm_script.requests] == ["standard", "fast"]
    sent = llm_script.requests[0].messages
    contents = [m["content"] for m in sent]
    assert "What is the capital of France?" in contents
    assert "Paris." in contents
    assert contents[-1] == "And the capital of Italy?"


def _answered_exchange(chat: Any, user: Any) -> tuple[str, str]:
    """A finished user/assistant exchange the server knows only by its rows (no cache)."""
    from chats import services

    old_user, old_reply = new_id(), new_id()
    services.user_message_accept(chat=chat, message_id=old_user, user=user)
    services.message_status_set(message_id=old_user, status="done")
    services.assistant_message_create(chat=chat, message_id=old_reply)
    services.message_status_set(message_id=old_reply, status="done")
    return old_user, old_reply


def _exchange_history(old_user: str, old_reply: str) -> list[dict[str, str]]:
    """What the client answers ``request_chat_history`` with for that exchange."""
    return [
        {"message_id": old_user, "role": "user", "content": "Capital of France?"},
        {"message_id": old_reply, "role": "assistant", "content": "Paris."},
    ]


async def test_a_base_model_fast_tier_gets_a_heuristic_title_and_no_model_steps(
    ws_client, chat, user, instance, llm_script
):
    from pipeline.turn import instance_context_forget

    # Not the bundled model's exact name, but a base model as well: no JSON schema there.
    instance.tier_map = {
        "fast": [{"model": "text-completion-openai/tiny-base", "api_base": "http://127.0.0.1:9/v1"}]
    }
    await sync_to_async(instance.save)()
    instance_context_forget()
    llm_script.reply(text="Paris.", model="standard")
    client = await ws_client(user)
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="What is the capital of France?",
    )
    frames = await client.until("stream.done")
    titles = [f.get("title") for f in frames if f["type"] == "preprocess.done"]
    assert titles == ["What is the capital of France"]
    assert frames[-1]["status"] == "done"
    assert [r.model for r in llm_script.requests] == ["standard"]


async def test_a_base_model_main_tier_gets_the_short_header_in_the_message_language(
    ws_client, chat, user, instance, llm_wire
):
    from pipeline.turn import instance_context_forget
    from tests.llm_fake import WireReply, sse_body

    base = {"model": "text-completion-openai/tiny-base", "api_base": llm_wire.api_base}
    instance.tier_map = {"fast": [base], "standard": [base], "heavy": [base]}
    await sync_to_async(instance.save)()
    instance_context_forget()
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "b",
             "choices": [{"index": 0, "text": " 391.", "finish_reason": "stop"}]}  # fmt: skip
    llm_wire.queue(WireReply([sse_body([chunk])]))
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Wie viel ist 17 mal 23?"
    )
    frames = await client.until("stream.done")

    assert frames[-1]["status"] == "done"
    assert frames[-1]["content"] == "391."
    prompt = llm_wire.requests[0]["body"]["prompt"]
    assert prompt.startswith(f"{instance.name} is a friendly, helpful AI assistant.")
    assert "Q: Wie viele Tage hat eine Woche?\nA: Eine Woche hat sieben Tage.\n" in prompt
    assert prompt.endswith("\n\nQ: Wie viel ist 17 mal 23?\nA:")
    # The instance's sections (instructions a base model would echo) are not sent.
    assert "You are" not in prompt
    assert "detected:" not in prompt
    assert llm_wire.requests[0]["body"]["temperature"] == 0

    # A follow-up's prompt holds no earlier exchange (a base model would repeat its answer).
    seven = {**chunk, "choices": [{"index": 0, "text": " 7.", "finish_reason": "stop"}]}
    llm_wire.queue(WireReply([sse_body([seven])]))
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Und 3 plus 4?"
    )
    later = await client.until("stream.done")
    assert later[-1]["content"] == "7."
    follow_up = llm_wire.requests[-1]["body"]["prompt"]
    assert follow_up.endswith("\n\nQ: Und 3 plus 4?\nA:")
    assert "17 mal 23" not in follow_up
    assert "391" not in follow_up


async def test_cache_miss_asks_the_client_for_history_then_answers(
    ws_client, chat, user, llm_script
):
    old_user, old_reply = await sync_to_async(_answered_exchange)(chat, user)
    llm_script.reply(text="Still Paris.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Are you sure?"
    )
    frames = await client.until("request_chat_history")
    assert _types(frames) == ["message.accepted", "request_chat_history"]
    request = frames[-1]
    assert request["reason"] == "cache_miss"
    assert request["expected_messages"] == 2
    await client.send(
        type="chat.history",
        chat_id=chat.pk,
        request_id=request["request_id"],
        messages=_exchange_history(old_user, old_reply),
    )
    frames = await client.until("postprocess.done")
    assert _text(frames) == "Still Paris."
    contents = [m["content"] for m in llm_script.requests[0].messages]
    assert contents[-3:] == ["Capital of France?", "Paris.", "Are you sure?"]


async def test_a_history_that_never_arrives_is_history_timeout_not_a_cache_outage(
    ws_client, chat, user, llm_script, monkeypatch
):
    from pipeline import turn

    monkeypatch.setattr(turn, "HISTORY_WAIT_S", 0.3)
    await sync_to_async(_answered_exchange)(chat, user)
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Are you sure?"
    )

    frames = await client.until("stream.done")

    error = next(f for f in frames if f["type"] == "error")
    assert error["code"] == "history_timeout"
    assert error["message"] == turn.HISTORY_TIMEOUT_MESSAGE
    assert error["chat_id"] == chat.pk
    assert frames[-1]["status"] == "failed"
    assert llm_script.requests == []


async def test_a_summary_sent_with_the_history_reaches_the_prompt_and_the_notes(
    ws_client, chat, user, llm_script
):
    from pipeline import prompts, state

    old_user, old_reply = await sync_to_async(_answered_exchange)(chat, user)
    llm_script.reply(text="Still Paris.", model="standard")
    llm_script.reply(text='{"follow_ups": [], "topic_changed": false, "summary": ""}', model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Are you sure?"
    )
    request = (await client.until("request_chat_history"))[-1]
    await client.send(
        type="chat.history",
        chat_id=chat.pk,
        request_id=request["request_id"],
        messages=_exchange_history(old_user, old_reply),
        summary="They asked for the capital of France.",
    )
    await client.until("postprocess.done")
    sent = llm_script.requests[0].messages
    assert sent[1:3] == prompts.summary_exchange("They asked for the capital of France.")
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert (notes.summary, notes.summary_covers, notes.language) == (
        "They asked for the capital of France.",
        None,
        "en",
    )


async def test_a_history_request_whose_socket_closed_is_asked_again_on_resume(
    ws_client, chat, user, llm_script
):
    old_user, old_reply = await sync_to_async(_answered_exchange)(chat, user)
    llm_script.reply(text="Still Paris.", model="standard")
    llm_script.reply(text=POST, model="fast")
    first = await ws_client(user)
    await first.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Are you sure?"
    )
    request = (await first.until("request_chat_history"))[-1]
    await first.close()  # the tab closed before it answered

    second = await ws_client(user, expect_active=False)
    active = await second.recv()
    assert active["type"] == "task.active"
    (task,) = active["tasks"]
    await second.send(
        type="stream.resume", chat_id=chat.pk, task_id=task["task_id"], last_sequence=0
    )
    frames = await second.until("request_chat_history")
    assert _types(frames) == ["stream.snapshot", "request_chat_history"]
    assert frames[-1]["request_id"] == request["request_id"]
    await second.send(
        type="chat.history",
        chat_id=chat.pk,
        request_id=request["request_id"],
        messages=_exchange_history(old_user, old_reply),
    )
    frames = await second.until("stream.done")
    assert frames[-1]["status"] == "done"
    assert frames[-1]["content"] == "Still Paris."


async def test_calculator_question_shows_a_tool_card_then_the_answer(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(
        tool_calls=[{"id": "call_1", "name": "calculator", "arguments": {"expression": "17 * 23"}}],
        model="standard",
    )
    llm_script.reply(text="17 x 23 = 391.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="What is 17 * 23?"
    )
    frames = await client.until("postprocess.done")
    pre = next(f for f in frames if f["type"] == "preprocess.done")
    assert "calculator" in pre["tools"]
    statuses = [f for f in frames if f["type"] == "skill.status"]
    assert [s["status"] for s in statuses] == ["processing", "finished"]
    assert statuses[0]["tool"] == "calculator"
    assert "391" in statuses[1]["preview"]
    update = next(f for f in frames if f["type"] == "embed.update")
    assert json.loads(update["content"])["result"] is not None
    assert _text(frames) == "17 x 23 = 391."
    tool_message = llm_script.requests[-2].messages[-1]
    assert tool_message["role"] == "tool"
    assert "391" in tool_message["content"]
    assert tool_message["content"].startswith('<tool_output tool="calculator">')


async def test_malformed_and_oversized_frames_get_errors_and_the_socket_stays_open(ws_client, user):
    client = await ws_client(user)
    await client.send_text("{not json")
    assert (await client.recv())["code"] == "invalid_frame"
    await client.send(type="chat.explode")
    assert (await client.recv())["code"] == "unknown_type"
    await client.send(
        type="message.send", chat_id=new_id(), message_id=new_id(), content="x" * 2_000_000
    )
    error = await client.recv()
    assert error["type"] == "error"
    assert error["code"] == "frame_too_large"
    await client.send(type="ping", ts=42)
    assert await client.recv() == {"type": "pong", "ts": 42}


async def test_another_users_chat_is_not_found(ws_client, chat, keyed_user_factory, llm_script):
    other = await sync_to_async(keyed_user_factory)("mallory")
    client = await ws_client(other)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="hi")
    error = await client.recv()
    assert error["code"] == "not_found"
    assert error["chat_id"] == chat.pk
    assert await sync_to_async(Message.objects.filter(chat=chat).count)() == 0


async def test_duplicate_message_id_starts_no_second_turn(ws_client, chat, user, llm_script):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Hello!", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi there"
    )
    await client.until("postprocess.done")
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi there"
    )
    error = await client.recv()
    assert error["code"] == "conflict"
    assert error["message_id"] == message_id
    assert await sync_to_async(Message.objects.filter(chat=chat).count)() == 2


async def test_duplicate_of_a_message_whose_turn_runs_follows_that_turn(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=["Hel", "lo!"], model="standard", delay_s=0.05)
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    message_id = new_id()
    frame = {"type": "message.send", "chat_id": chat.pk, "message_id": message_id}
    await client.send(**frame, content="Hi there")
    # At once: the turn may have no record in Redis yet, only in this process.
    await client.send(**frame, content="Hi there")
    frames = await client.until("postprocess.done")
    assert "error" not in _types(frames)
    accepted = [f for f in frames if f["type"] == "message.accepted"]
    assert len(accepted) >= 1
    assert {f["task_id"] for f in accepted} == {frames[0]["task_id"]}
    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["content"] == "Hello!"
    assert await sync_to_async(Message.objects.filter(chat=chat).count)() == 2


async def test_duplicate_of_a_message_whose_turn_just_ended_names_its_task(
    ws_client, chat, user, llm_script
):
    from chats import services
    from pipeline import runtime, state

    client = await ws_client(user)
    message_id, reply_id, task_id = new_id(), new_id(), new_id()

    def accepted() -> None:
        services.user_message_accept(chat=chat, message_id=message_id, user=user)
        services.assistant_message_create(chat=chat, message_id=reply_id)

    await sync_to_async(accepted)()
    # Its record is still in Redis, but this process no longer runs it (it just ended).
    record = state.TaskRecord(
        task_id=task_id,
        user_id=str(user.pk),
        chat_id=chat.pk,
        message_id=message_id,
        assistant_message_id=reply_id,
        owner=runtime.registry().channel,
        state="running",
    )
    await state.record_save(record)
    await state.waiter_keep_alive(task_id)  # not an orphan for the reaper
    try:
        await client.send(
            type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi there"
        )
        error = await client.recv()
    finally:
        await state.record_delete(record)
    assert error == {
        "type": "error",
        "code": "conflict",
        "message": "This message was already accepted.",
        "chat_id": chat.pk,
        "message_id": message_id,
        "task_id": task_id,
    }


async def test_chat_update_stores_every_metadata_field_it_carries(ws_client, chat, user):
    from chats.models import Chat

    fields = {
        name: envelope()
        for name in (
            "encrypted_title",
            "encrypted_summary",
            "encrypted_tags",
            "encrypted_category",
            "encrypted_icon",
        )
    }
    client = await ws_client(user)
    await client.send(type="chat.update", chat_id=chat.pk, version=1, request_id="u1", **fields)
    answer = await client.recv()
    assert (answer["type"], answer["version"]) == ("chat.updated", 2)
    stored = await sync_to_async(Chat.objects.get)(pk=chat.pk)
    assert {name: getattr(stored, name) for name in fields} == fields
    assert stored.meta_version == 2
    # Clearing one field leaves the others as they were.
    await client.send(type="chat.update", chat_id=chat.pk, version=2, encrypted_icon=None)
    assert (await client.recv())["type"] == "chat.updated"
    stored = await sync_to_async(Chat.objects.get)(pk=chat.pk)
    assert (stored.encrypted_icon, stored.encrypted_category) == (
        None,
        fields["encrypted_category"],
    )


async def test_rate_limited_message_names_the_refused_message(
    ws_client, chat, user, llm_script, settings
):
    settings.PIPELINE_TURNS_PER_MINUTE = 0
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi there"
    )
    error = await client.recv()
    assert (error["code"], error["chat_id"], error["message_id"]) == (
        "rate_limited",
        chat.pk,
        message_id,
    )
    assert 1 <= error["retry_after"] <= 60  # the minute window's rest
    settings.PIPELINE_TURNS_PER_MINUTE = 30
    settings.PIPELINE_FRAMES_PER_10S = 0
    await client.send(type="message.retry", chat_id=chat.pk, message_id=message_id)
    error = await client.recv()
    assert 1 <= error.pop("retry_after") <= 10  # the 10 s window's rest
    assert error == {
        "type": "error",
        "code": "rate_limited",
        "message": "Too many frames; slow down.",
        "chat_id": chat.pk,
        "message_id": message_id,
    }
    assert await sync_to_async(Message.objects.filter(chat=chat).count)() == 0


async def test_an_unknown_mate_is_not_found_and_nothing_is_written(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=message_id,
        content="Hi there",
        overrides={"mate": "nope"},
    )

    error = await client.recv()

    assert (error["type"], error["code"], error["chat_id"], error["message_id"]) == (
        "error",
        "not_found",
        chat.pk,
        message_id,
    )
    assert "'nope'" in error["message"]
    assert await client.nothing()
    assert await sync_to_async(Message.objects.filter(chat=chat).count)() == 0
    assert llm_script.requests == []
    # A mate of the instance, by its category, is taken.
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Hello.", model="standard")
    llm_script.reply(text=POST, model="fast")
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=message_id,
        content="Hi there",
        overrides={"mate": "general"},
    )
    frames = await client.until("postprocess.done")
    assert frames[0]["type"] == "message.accepted"
    assert frames[1]["mate"] == "General"


async def test_a_retry_naming_an_answer_is_not_found_with_its_ids(ws_client, chat, user):
    _question, answer = await sync_to_async(_answered_exchange)(chat, user)
    client = await ws_client(user)
    await client.send(type="message.retry", chat_id=chat.pk, message_id=answer)

    error = await client.recv()

    assert (error["code"], error["chat_id"], error["message_id"]) == (
        "not_found",
        chat.pk,
        answer,
    )


async def test_invalid_frames_count_against_the_frame_limit(ws_client, user, settings):
    settings.PIPELINE_FRAMES_PER_10S = 3
    client = await ws_client(user)
    codes = []
    for _ in range(5):
        await client.send_text("{not json")
        codes.append((await client.recv())["code"])
    # The limit spent by garbage holds for a valid frame too.
    await client.send(type="ping")
    codes.append((await client.recv())["code"])

    assert codes == ["invalid_frame"] * 3 + ["rate_limited"] * 3


async def test_anonymous_socket_is_refused():
    from channels.testing import WebsocketCommunicator

    from openmates.asgi import application

    communicator = WebsocketCommunicator(
        application, "/ws/chat/", headers=[(b"origin", b"http://localhost")]
    )
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_socket_without_allowed_origin_is_refused(user):
    from channels.testing import WebsocketCommunicator

    from openmates.asgi import application
    from tests.pipeline.conftest import session_cookie

    cookie = await sync_to_async(session_cookie)(user)
    communicator = WebsocketCommunicator(
        application, "/ws/chat/", headers=[(b"origin", b"http://evil.example"), (b"cookie", cookie)]
    )
    connected, _ = await communicator.connect()
    assert not connected
    await communicator.disconnect()


async def test_chat_create_and_store_round_trip(ws_client, user, instance):
    client = await ws_client(user)
    chat_id = new_id()
    await client.send(
        type="chat.create",
        request_id="r1",
        chat_id=chat_id,
        instance="demo",
        encrypted_chat_key=envelope(),
    )
    created = await client.recv()
    assert created == {"type": "chat.created", "chat_id": chat_id, "version": 1, "request_id": "r1"}


async def test_socket_of_an_ended_session_is_closed_with_4401(ws_client, user):
    from accounts.services import user_sockets_close

    client = await ws_client(user)
    await sync_to_async(user_sockets_close)(user_id=user.pk)
    closed = await client.communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4401}


async def test_a_turn_announced_after_it_ended_reaches_the_socket_from_its_snapshot(
    ws_client, chat, user
):
    from channels.layers import get_channel_layer

    from pipeline import runtime, state

    client = await ws_client(user)
    task_id, reply_id = new_id(), new_id()
    await state.snapshot_save(
        user_id=user.pk,
        task_id=task_id,
        snapshot=state.Snapshot(
            chat_id=str(chat.pk),
            message_id=reply_id,
            sequence=2,
            content="Already over.",
            status="done",
            model="standard",
            usage={"prompt_tokens": 3, "completion_tokens": 2},
        ),
    )
    announce = {"type": "turn.announce", "task_id": task_id, "owner": "specific.gone!x"}
    await get_channel_layer().group_send(runtime.user_group(user.pk), announce)
    frames = await client.until("stream.done")
    assert _types(frames) == ["stream.snapshot", "stream.done"]
    assert frames[0]["content"] == frames[1]["content"] == "Already over."
    assert frames[1]["status"] == "done"
    assert frames[1]["message_id"] == reply_id
    await get_channel_layer().group_send(runtime.user_group(user.pk), announce)
    assert await client.nothing()  # followed once
