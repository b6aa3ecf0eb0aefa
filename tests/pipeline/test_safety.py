"""The model-based safety check on follow-ups: it runs before the main call only when a
local heuristic fired (docs/architecture.md §6), and a rejection it decides is answered with the
canned reply plus ``error`` ``safety_rejected`` (real stack, scripted model)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline import preprocess as pre
from pipeline import turn
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

POST = '{"follow_ups": [], "topic_changed": false, "summary": "Medicine doses."}'
# Fires the keyword heuristic without reaching a rejection score on its own.
BORDERLINE = "Is this medicine a poison in large doses?"


def _earlier_exchange() -> list[dict[str, str]]:
    """A client history, so the message is a follow-up (not a first message)."""
    return [
        {"message_id": new_id(), "role": "user", "content": "My grandmother takes aspirin."},
        {"message_id": new_id(), "role": "assistant", "content": "Aspirin is a common drug."},
    ]


def _types(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


def test_the_borderline_message_fires_the_heuristic_without_rejecting() -> None:
    scores = pre.heuristic_safety(BORDERLINE)
    assert scores.heuristic_fired
    assert not scores.rejected
    assert not pre.heuristic_safety("And the capital of Italy?").heuristic_fired


async def test_follow_up_whose_heuristic_fires_is_checked_by_the_model_before_the_main_call(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text='{"harmful": 2, "misuse": 0}', model="fast")
    llm_script.reply(text="In large doses, yes.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content=BORDERLINE,
        history=_earlier_exchange(),
    )
    frames = await client.until("postprocess.done")

    assert [r.model for r in llm_script.requests] == ["fast", "standard", "fast"]
    check = llm_script.requests[0].messages
    assert check[0]["content"].startswith("Rate the user's message")
    assert check[1] == {"role": "user", "content": BORDERLINE}
    assert "error" not in _types(frames)
    done = next(f for f in frames if f["type"] == "stream.done")
    assert (done["status"], done["content"]) == ("done", "In large doses, yes.")
    # A follow-up: the earlier exchange reached the main model, and no title was made.
    contents = [m["content"] for m in llm_script.requests[1].messages]
    assert contents[-3:] == [
        "My grandmother takes aspirin.",
        "Aspirin is a common drug.",
        BORDERLINE,
    ]


async def test_follow_up_without_a_heuristic_signal_makes_no_fast_call_before_the_main_one(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text="Rome.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="And the capital of Italy?",
        history=_earlier_exchange(),
    )
    await client.until("postprocess.done")

    assert [r.model for r in llm_script.requests] == ["standard", "fast"]


async def test_follow_up_rejected_by_the_model_check_gets_the_canned_reply_and_the_error(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text='{"harmful": 8, "misuse": 3}', model="fast")
    client = await ws_client(user)
    message_id = new_id()
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=message_id,
        content=BORDERLINE,
        history=_earlier_exchange(),
    )
    frames = await client.until("postprocess.done")

    assert _types(frames) == [
        "message.accepted",
        "preprocess.done",
        "stream.delta",
        "error",
        "stream.done",
        "postprocess.done",
    ]
    accepted, preprocessed, delta, error, done, post = frames
    assert preprocessed["reason"] == "safety_rejected"
    assert delta["delta"].startswith("I can't help with that request.")
    assert (error["code"], error["message"]) == ("safety_rejected", turn.SAFETY_REJECTED_MESSAGE)
    assert (error["chat_id"], error["task_id"], error["message_id"]) == (
        chat.pk,
        accepted["task_id"],
        message_id,
    )
    assert (done["status"], done["content"]) == ("done", delta["delta"])
    assert done["message_id"] == accepted["assistant_message_id"]
    assert post == {
        "type": "postprocess.done",
        "chat_id": chat.pk,
        "task_id": accepted["task_id"],
        "follow_ups": [],
        "memories_saved": 0,
    }
    assert [r.model for r in llm_script.requests] == ["fast"]
    assert await client.nothing()
