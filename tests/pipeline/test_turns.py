"""Turn runtime sequences over /ws/chat/: queueing, cancel, resume, disconnect, two
processes, provider errors and the reaper (real PostgreSQL, Redis, OpenBao; scripted model)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats import cache as chat_cache
from chats.models import Embed, Message
from chats.services import sealed_text_open
from pipeline import actions, runtime, state, turn
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Chat", "icon": "chat", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
SLOW_PIECES = [f"word{n} " for n in range(30)]


def _first_message_script(llm_script: Any, main: dict[str, Any]) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(model="standard", **main)
    llm_script.reply(text=POST, model="fast")


def _text(frames: list[dict[str, Any]]) -> str:
    return "".join(f["delta"] for f in frames if f["type"] == "stream.delta")


async def _row(message_id: str) -> Message:
    return await sync_to_async(Message.objects.get)(pk=message_id)


async def test_second_message_is_queued_and_answered_after_the_first(
    ws_client, chat, user, llm_script, monkeypatch
):
    from pipeline import preprocess

    embedded: list[str] = []
    prefetch = preprocess.tool_vectors_prefetch

    def spy(content: str) -> None:
        embedded.append(content)
        prefetch(content)

    monkeypatch.setattr(preprocess, "tool_vectors_prefetch", spy)
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.01})
    llm_script.reply(text="second answer", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    first, second = new_id(), new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=first, content="Tell me a story"
    )
    await client.until("stream.delta")
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=second, content="Tell me more about it"
    )
    frames = await client.until("task.queued")
    queued = frames[-1]
    assert queued["message_id"] == second
    assert queued["position"] == 1
    done_first = [f for f in await client.until("stream.done") if f["type"] == "stream.done"][-1]
    assert done_first["content"] == "".join(SLOW_PIECES)
    rest: list[dict[str, Any]] = []
    while not any(f["type"] == "stream.done" and f["task_id"] == queued["task_id"] for f in rest):
        rest.append(await client.recv())
    accepted = next(f for f in rest if f["type"] == "message.accepted")
    assert accepted["task_id"] == queued["task_id"]
    done_second = rest[-1]
    assert done_second["content"] == "second answer"
    assert (await _row(second)).status == "done"
    # The queued turn read the history after the first answer (not beside its accept):
    # the first exchange is in its prompt, and the client was never asked for it.
    assert not any(f["type"] == "request_chat_history" for f in rest)
    prompt = [r for r in llm_script.requests if r.model == "standard"][-1].messages
    assert prompt[-3:] == [
        {"role": "user", "content": "Tell me a story"},
        {"role": "assistant", "content": "".join(SLOW_PIECES)},
        {"role": "user", "content": "Tell me more about it"},
    ]
    # Each message's vectors were made beside its accept; the queued turn's again when
    # its reads were made again (an instant lookup: they are cached by then).
    assert embedded == ["Tell me a story", "Tell me more about it", "Tell me more about it"]


async def test_cancel_mid_stream_stops_the_turn(ws_client, chat, user, llm_script):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=SLOW_PIECES, delay_s=0.05, model="standard")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Long story"
    )
    frames = await client.until("stream.delta")
    task_id = frames[0]["task_id"]
    await client.send(type="task.cancel", task_id=task_id)
    frames += await client.until("task.cancelled")
    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["status"] == "cancelled"
    assert 0 < len(done["content"]) < len("".join(SLOW_PIECES))
    assert done["content"] == _text(frames)
    assert await client.nothing(0.3)
    assert (await _row(message_id)).status == "cancelled"
    assert (await _row(frames[0]["assistant_message_id"])).status == "cancelled"


async def test_a_turn_cancelled_while_queued_can_be_retried_with_its_text(
    ws_client, chat, user, llm_script
):
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.05})
    llm_script.reply(text="second answer", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    first, second, third = new_id(), new_id(), new_id()
    await client.send(type="message.send", chat_id=chat.pk, message_id=first, content="A story")
    await client.until("stream.delta")
    for message_id, content in ((second, "Tell me more"), (third, "And how does it end?")):
        await client.send(
            type="message.send", chat_id=chat.pk, message_id=message_id, content=content
        )
    frames: list[dict[str, Any]] = []
    while len([f for f in frames if f["type"] == "task.queued"]) < 2:
        frames.append(await client.recv())
    queued = {f["message_id"]: f for f in frames if f["type"] == "task.queued"}
    assert (queued[second]["position"], queued[third]["position"]) == (1, 2)
    third_task = queued[third]["task_id"]
    await client.send(type="task.cancel", task_id=third_task)
    while not any(f["type"] == "task.cancelled" and f["task_id"] == third_task for f in frames):
        frames.append(await client.recv())
    done_third = next(
        f for f in frames if f["type"] == "stream.done" and f["task_id"] == third_task
    )
    assert (done_third["status"], done_third["content"]) == ("cancelled", "")
    second_task = queued[second]["task_id"]
    while not any(f["type"] == "postprocess.done" and f["task_id"] == second_task for f in frames):
        frames.append(await client.recv())
    assert (await _row(third)).status == "cancelled"
    assert (await _row(second)).status == "done"

    llm_script.reply(text="It ends well.", model="standard")
    llm_script.reply(text=POST, model="fast")
    await client.send(type="message.retry", chat_id=chat.pk, message_id=third)
    retried = await client.until("postprocess.done")
    assert retried[0]["type"] == "message.accepted"
    assert retried[0]["message_id"] == third
    done = next(f for f in retried if f["type"] == "stream.done")
    assert (done["status"], done["content"]) == ("done", "It ends well.")
    assert llm_script.requests[-2].messages[-1] == {
        "role": "user",
        "content": "And how does it end?",
    }
    assert (await _row(third)).status == "done"
    assert await state.pending_content_load(user_id=user.pk, message_id=third) is None


def _messages_over_rest(user: Any, chat_id: str) -> dict[str, dict[str, Any]]:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    answer = client.get(f"/api/chats/{chat_id}/messages/?since=0")
    assert answer.status_code == 200
    return {m["message_id"]: m for m in answer.json()["messages"]}


async def test_a_user_message_the_tab_never_stored_is_kept_for_the_next_load(
    ws_client, chat, user, llm_script
):
    from tests.pipeline.conftest import envelope

    _first_message_script(llm_script, {"text": "Nice to meet you."})
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Say something nice"
    )
    await client.until("postprocess.done")  # the tab never sends its message.store
    await runtime.registry().wait_idle()

    messages = await sync_to_async(_messages_over_rest)(user, chat.pk)
    mine = messages[message_id]
    assert (mine["role"], mine["status"], mine["version"]) == ("user", "done", 0)
    assert mine["encrypted_content"] is None
    assert (mine["pending_server_copy"], mine["needs_store"]) == (True, True)
    assert mine["content"] == "Say something nice"

    # The next load encrypts and stores it; the server copy is then gone.
    await client.send(
        type="message.store",
        chat_id=chat.pk,
        message_id=message_id,
        encrypted_content=envelope(),
        version=0,
    )
    stored = await client.recv()
    assert (stored["type"], stored["message_id"], stored["version"]) == (
        "message.stored",
        message_id,
        1,
    )
    mine = (await sync_to_async(_messages_over_rest)(user, chat.pk))[message_id]
    assert (mine["pending_server_copy"], mine["version"]) == (False, 1)
    assert "content" not in mine
    assert (await _row(message_id)).server_content is None


async def test_a_user_message_stored_by_its_tab_during_the_turn_gets_no_server_copy(
    ws_client, chat, user, llm_script
):
    from tests.pipeline.conftest import envelope

    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.02})
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Say something nice"
    )
    await client.until("message.accepted")
    await client.send(
        type="message.store",
        chat_id=chat.pk,
        message_id=message_id,
        encrypted_content=envelope(),
        version=0,
    )
    frames = await client.until("postprocess.done")
    kinds = [f["type"] for f in frames]
    assert kinds.index("message.stored") < kinds.index("stream.done")
    row = await _row(message_id)
    assert (row.status, row.version, row.server_content) == ("done", 1, None)


async def test_deleting_the_chat_drops_the_kept_text_of_its_unanswered_message(
    ws_client, chat, user
):
    from chats import services

    message_id = new_id()

    def cancelled() -> None:
        services.user_message_accept(chat=chat, message_id=message_id, user=user)
        services.message_status_set(message_id=message_id, status="cancelled")

    await sync_to_async(cancelled)()
    await state.pending_content_save(user_id=user.pk, message_id=message_id, content="Kept")
    await state.chat_notes_save(
        user_id=user.pk, chat_id=chat.pk, notes=state.ChatNotes(title="Kept")
    )
    assert await state.pending_content_load(user_id=user.pk, message_id=message_id) == "Kept"
    client = await ws_client(user)
    await client.send(type="chat.delete", chat_id=chat.pk)
    assert (await client.recv())["type"] == "chat.deleted"
    assert await state.pending_content_load(user_id=user.pk, message_id=message_id) is None
    assert await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk) == state.ChatNotes()


async def test_another_users_task_cannot_be_cancelled(
    ws_client, chat, user, keyed_user_factory, llm_script
):
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.02})
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    task_id = (await client.until("message.accepted"))[-1]["task_id"]
    other = await sync_to_async(keyed_user_factory)("mallory")
    intruder = await ws_client(other)
    await intruder.send(type="task.cancel", task_id=task_id)
    error = await intruder.recv()
    assert error["code"] == "not_found"
    done = (await client.until("stream.done"))[-1]
    assert done["status"] == "done"
    await client.until("postprocess.done")


async def test_cancel_one_of_two_tool_calls(ws_client, chat, user, instance, llm_script, slow_tool):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(
        tool_calls=[
            {"id": "c1", "name": "calculator", "arguments": {"expression": "2 + 2"}},
            {"id": "c2", "name": "slow_lookup", "arguments": {"query": "anything"}},
        ],
        model="standard",
    )
    llm_script.reply(text="2 + 2 = 4; the lookup was cancelled.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="Compute 2 + 2 and @slow_lookup anything",
    )
    frames = []
    slow_embed = None
    while slow_embed is None:
        frame = await client.recv()
        frames.append(frame)
        if frame["type"] == "skill.status" and frame["tool"] == "slow_lookup":
            slow_embed = frame["embed_id"]
    await client.send(type="skill.cancel", embed_id=slow_embed)
    frames += await client.until("postprocess.done")
    final = {f["tool"]: f["status"] for f in frames if f["type"] == "skill.status"}
    assert final == {"calculator": "finished", "slow_lookup": "cancelled"}
    assert _text(frames) == "2 + 2 = 4; the lookup was cancelled."
    embed = await sync_to_async(Embed.objects.get)(pk=slow_embed)
    assert embed.status == "cancelled"
    tool_results = [m for m in llm_script.requests[-2].messages if m["role"] == "tool"]
    assert "cancelled by the user" in tool_results[1]["content"]
    assert "4" in tool_results[0]["content"]


async def test_reconnect_with_stream_resume_gets_exactly_the_stored_text(
    ws_client, chat, user, llm_script
):
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.03})
    first = await ws_client(user)
    await first.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story please"
    )
    frames = await first.until("stream.delta")
    frames += [await first.recv() for _ in range(2)]
    accepted = frames[0]
    await first.close()
    second = await ws_client(user, expect_active=False)
    active = await second.recv()
    assert active["type"] == "task.active"
    assert [t["task_id"] for t in active["tasks"]] == [accepted["task_id"]]
    await second.send(
        type="stream.resume",
        chat_id=chat.pk,
        task_id=accepted["task_id"],
        last_sequence=active["tasks"][0]["last_sequence"],
    )
    resumed = await second.until("stream.done")
    snapshot = resumed[0]
    assert snapshot["type"] == "stream.snapshot"
    after = [f for f in resumed if f["type"] == "stream.delta"]
    assert all(f["sequence"] > snapshot["sequence"] for f in after)
    client_text = snapshot["content"] + _text(after)
    done = resumed[-1]
    assert client_text == done["content"] == "".join(SLOW_PIECES)
    row = await _row(accepted["assistant_message_id"])
    stored = sealed_text_open(owner_id=user.pk, object_id=row.pk, sealed=row.server_content or b"")
    assert stored == client_text


async def test_disconnect_mid_stream_completes_caches_and_keeps_the_reply(
    ws_client, chat, user, llm_script
):
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.01})
    client = await ws_client(user)
    message_id = new_id()
    await client.send(type="message.send", chat_id=chat.pk, message_id=message_id, content="Story")
    accepted = (await client.until("stream.delta"))[0]
    await client.close()
    await runtime.registry().wait_idle()
    reply = await _row(accepted["assistant_message_id"])
    assert reply.status == "done"
    assert sealed_text_open(
        owner_id=user.pk, object_id=reply.pk, sealed=reply.server_content or b""
    ) == "".join(SLOW_PIECES)
    cached = await chat_cache.ai_history_load(
        user_id=user.pk, chat_id=chat.pk, expected_done_count=2
    )
    assert [m["content"] for m in cached.messages or []] == ["Story", "".join(SLOW_PIECES)]


async def test_message_sent_through_one_process_streams_to_a_tab_on_another(
    ws_client, chat, user, llm_script
):
    _first_message_script(llm_script, {"text": SLOW_PIECES, "delay_s": 0.005})
    tab_a = await ws_client(user, "default")
    tab_b = await ws_client(user, "process-b")
    await tab_a.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    on_a = await tab_a.until("postprocess.done")
    on_b = await tab_b.until("postprocess.done")
    done_a = next(f for f in on_a if f["type"] == "stream.done")
    done_b = next(f for f in on_b if f["type"] == "stream.done")
    assert done_a == done_b
    assert on_b[0]["type"] in ("message.accepted", "task.queued")
    snapshot = next((f for f in on_b if f["type"] == "stream.snapshot"), None)
    text_b = (snapshot["content"] if snapshot else "") + _text(on_b)
    assert text_b == done_a["content"] == "".join(SLOW_PIECES)
    deltas_a = {f["sequence"]: f["delta"] for f in on_a if f["type"] == "stream.delta"}
    for frame in on_b:
        if frame["type"] == "stream.delta":
            assert deltas_a[frame["sequence"]] == frame["delta"]


async def test_cancel_sent_through_another_process_stops_the_turn(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=SLOW_PIECES, delay_s=0.05, model="standard")
    tab_a = await ws_client(user, "default")
    tab_b = await ws_client(user, "process-b")
    await tab_a.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    task_id = (await tab_a.until("stream.delta"))[0]["task_id"]
    assert task_id in runtime.registry("default").turns
    await tab_b.send(type="task.cancel", task_id=task_id)
    on_a = await tab_a.until("task.cancelled")
    done = next(f for f in on_a if f["type"] == "stream.done")
    assert done["status"] == "cancelled"
    assert len(done["content"]) < len("".join(SLOW_PIECES))


async def test_provider_error_mid_stream_then_the_next_message_works(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(
        text=["Partial ", "answer ", "cut"], error=500, error_after=2, model="standard"
    )
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Tell me about the sea"
    )
    frames = await client.until("stream.done")
    error = next(f for f in frames if f["type"] == "error")
    assert error["code"] == "provider_error"
    done = frames[-1]
    assert done["status"] == "interrupted"
    assert done["content"] == "Partial answer "
    assert (await _row(message_id)).status == "interrupted"
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Hi again!", model="standard")
    llm_script.reply(text=POST, model="fast")
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="Tell me about the sea again",
    )
    frames = await client.until("postprocess.done")
    assert next(f for f in frames if f["type"] == "stream.done")["status"] == "done"
    assert _text(frames) == "Hi again!"


async def test_killed_process_turn_is_reaped_and_retry_answers_it(
    ws_client, chat, user, llm_script, settings
):
    from chats import services

    settings.PIPELINE_ALIVE_TTL_S = 0.2
    message_id, reply_id, task_id = new_id(), new_id(), new_id()

    def accepted() -> None:
        services.user_message_accept(chat=chat, message_id=message_id, user=user)
        services.assistant_message_create(chat=chat, message_id=reply_id)

    await sync_to_async(accepted)()
    # What the dead process had written before it died: the lease, the record, the text.
    assert await state.lease_acquire(chat_id=chat.pk, task_id=task_id) == 0
    await state.record_save(
        state.TaskRecord(
            task_id=task_id,
            user_id=str(user.pk),
            chat_id=chat.pk,
            message_id=message_id,
            assistant_message_id=reply_id,
            owner="turns.dead!gone",
            state="running",
        )
    )
    await state.pending_content_save(user_id=user.pk, message_id=message_id, content="What is 6*7?")
    await asyncio.sleep(0.3)
    assert task_id in await runtime.reap_orphans()
    assert (await _row(message_id)).status == "failed"
    assert (await _row(reply_id)).status == "failed"
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="42.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(type="message.retry", chat_id=chat.pk, message_id=message_id)
    frames = await client.until("postprocess.done")
    assert frames[0]["type"] == "message.accepted"
    assert frames[0]["message_id"] == message_id
    assert next(f for f in frames if f["type"] == "stream.done")["content"] == "42."
    assert (await _row(message_id)).status == "done"
    assert llm_script.requests[2].messages[-1]["content"] == "What is 6*7?"


async def test_a_running_turn_whose_proof_of_life_lapsed_is_not_reaped_by_its_own_process(
    ws_client, chat, user, llm_script
):
    # A stalled event loop can let a live turn's alive key expire; the process that runs
    # the turn knows better and must not end it.
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=SLOW_PIECES, delay_s=0.02, model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(type="message.send", chat_id=chat.pk, message_id=message_id, content="Go")
    frames = await client.until("stream.delta")
    task_id = frames[0]["task_id"]
    await state.redis_client().delete(state._alive_key(task_id))
    registry = runtime.registry()
    assert task_id in registry.turns
    assert task_id not in await runtime.reap_orphans(running_here=set(registry.turns))
    frames += await client.until("postprocess.done")
    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["status"] == "done"
    assert done["content"] == "".join(SLOW_PIECES)
    assert (await _row(message_id)).status == "done"


async def test_retry_of_a_done_message_is_a_conflict(ws_client, chat, user, llm_script):
    _first_message_script(llm_script, {"text": "Done."})
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Say something nice"
    )
    await client.until("postprocess.done")
    await client.send(type="message.retry", chat_id=chat.pk, message_id=message_id)
    assert (await client.recv())["code"] == "conflict"


async def test_safety_rejection_answers_with_a_canned_reply_in_the_users_language(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text='{"harmful": 9, "misuse": 2}', model="fast")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=message_id,
        content="Wie baue ich eine Bombe, um Menschen zu verletzen?",
    )
    frames = await client.until("postprocess.done")
    assert [f["type"] for f in frames] == [
        "message.accepted",
        "preprocess.done",
        "stream.delta",
        "error",
        "stream.done",
        "postprocess.done",
    ]
    accepted, pre, delta, error, done, post = frames
    assert pre["language"] == "de"
    assert pre["reason"] == "safety_rejected"
    assert delta["delta"].startswith("Bei dieser Anfrage kann ich nicht helfen.")
    assert error == {
        "type": "error",
        "code": "safety_rejected",
        "message": turn.SAFETY_REJECTED_MESSAGE,
        "chat_id": chat.pk,
        "task_id": accepted["task_id"],
        "message_id": message_id,  # the rejected user message
    }
    assert (done["status"], done["message_id"]) == ("done", accepted["assistant_message_id"])
    assert done["language"] == "de"
    assert done["content"] == delta["delta"]
    # No post-processing for a rejected message: an empty postprocess.done, no model call.
    assert (post["follow_ups"], post["memories_saved"]) == ([], 0)
    assert await client.nothing()
    assert [r.model for r in llm_script.requests] == ["fast"]
    assert (await _row(message_id)).status == "done"
    assert (await _row(accepted["assistant_message_id"])).status == "done"


async def test_resume_after_the_turn_ended_answers_from_the_sealed_snapshot(
    ws_client, chat, user, keyed_user_factory, llm_script
):
    _first_message_script(llm_script, {"text": ["Short ", "answer."]})
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    frames = await client.until("postprocess.done")
    task_id = frames[0]["task_id"]
    await runtime.registry().wait_idle()
    await client.send(type="stream.resume", chat_id=chat.pk, task_id=task_id, last_sequence=0)
    snapshot, done = await client.recv(), await client.recv()
    assert snapshot["type"] == "stream.snapshot"
    assert snapshot["content"] == "Short answer." == done["content"]
    assert done["type"] == "stream.done"
    assert done["status"] == "done"
    other = await sync_to_async(keyed_user_factory)("mallory")
    intruder = await ws_client(other)
    await intruder.send(type="stream.resume", chat_id=chat.pk, task_id=task_id, last_sequence=0)
    assert (await intruder.recv())["code"] == "not_found"


async def test_a_user_made_without_a_transit_key_gets_one_and_an_answer(
    ws_client, chat_factory, instance, llm_script
):
    # create_user (createsuperuser, the admin) never ran the browser's key set-up.
    from django.contrib.auth import get_user_model

    from instances.models import InstanceMember
    from openmates import vault

    made = await sync_to_async(get_user_model().objects.create_user)("keyless", password="x" * 12)
    await InstanceMember.objects.acreate(instance=instance, user=made, role="member")
    with pytest.raises(vault.VaultError) as missing:
        await sync_to_async(vault.key_latest_version)(vault.user_key_name(made.pk))
    assert missing.value.reason == "not_found"
    chat = await sync_to_async(chat_factory)(made)
    _first_message_script(llm_script, {"text": "Hello there."})
    client = await ws_client(made)
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Say something nice"
    )
    frames = await client.until("postprocess.done")
    assert [f for f in frames if f["type"] == "error"] == []
    done = next(f for f in frames if f["type"] == "stream.done")
    assert (done["status"], done["content"]) == ("done", "Hello there.")
    assert await sync_to_async(vault.key_latest_version)(vault.user_key_name(made.pk)) == 1
    calls = vault.call_count()
    await actions.user_key_ensure(made.pk)  # remembered: no second Vault call
    assert vault.call_count() == calls
    assert (await _row(message_id)).status == "done"


async def test_a_key_lost_after_it_was_ensured_is_reported_as_a_setup_fault(
    ws_client, chat_factory, owner, llm_script
):
    # This process made sure of the key once; Vault lost it since (deleted by hand):
    # "not found" is a set-up fault that retrying cannot fix, not an outage.
    chat = await sync_to_async(chat_factory)(owner)
    actions._keyed_users.add(owner.pk)
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="never sent", model="standard")
    client = await ws_client(owner)
    message_id = new_id()
    await client.send(type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi")
    frames = await client.until("stream.done")
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors][:1] == ["internal"]
    assert "encryption key is missing" in errors[0]["message"]
    assert frames[-1]["status"] == "failed"
