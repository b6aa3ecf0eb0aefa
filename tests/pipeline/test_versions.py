"""Edit and regenerate over /ws/chat/: messages form a tree (``parent_id``), earlier
versions stay, and the model is given the chosen branch only (docs/protocol.md §3), with
the real stack (PostgreSQL, Redis, OpenBao) and a scripted model."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats import cache as chat_cache
from chats.models import Message
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


@pytest.fixture
def user(keyed_user_factory: Any, owner: Any) -> Any:
    from openmates import vault

    vault.ensure_key(vault.user_key_name(owner.pk))
    return owner


@pytest.fixture
def chat(chat_factory: Any, user: Any, instance: Any) -> Any:
    # Only the main call: no safety, title or follow-up calls to script.
    instance.model_preprocessing_enabled = False
    instance.follow_ups_enabled = False
    instance.save()
    return chat_factory(user)


def _rows(chat_id: str) -> dict[str, tuple[str, str | None, str]]:
    return {
        m.pk: (m.role, m.parent_id, m.status)
        for m in Message.objects.filter(chat_id=chat_id).order_by("created_at")
    }


async def _turn(client: Any, **frame: Any) -> tuple[str, str, list[dict[str, Any]]]:
    """Send ``frame``; returns (question id, answer id, frames up to ``stream.done``)."""
    await client.send(**frame)
    frames = await client.until("stream.done")
    accepted = next(f for f in frames if f["type"] == "message.accepted")
    assert frames[-1]["status"] == "done", frames
    return accepted["message_id"], accepted["assistant_message_id"], frames


def _asked(llm_script: Any) -> list[str]:
    """The conversation the last main call was given (without its system prompt)."""
    return [m["content"] for m in llm_script.requests[-1].messages if m["role"] != "system"]


async def _send(client: Any, chat: Any, content: str, **extra: Any) -> tuple[str, str]:
    question, answer, _ = await _turn(
        client, type="message.send", chat_id=chat.pk, message_id=new_id(), content=content, **extra
    )
    return question, answer


async def test_regenerate_keeps_the_answer_and_the_branch_chosen_next_is_the_one_given(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    for text in ("Rivers are long.", "The Nile is longest.", "Amazon, by some counts."):
        llm_script.reply(text=text)
    q1, a1 = await _send(client, chat, "Tell me about rivers")
    q2, a2 = await _send(client, chat, "Which river is the longest")
    question, a2b, frames = await _turn(
        client,
        type="message.regenerate",
        chat_id=chat.pk,
        message_id=a2,
        content="Which river is the longest",
    )
    assert question == q2
    assert frames[-1]["message_id"] == a2b != a2
    # From the same point: neither the question twice nor the answer it replaces.
    assert _asked(llm_script) == [
        "Tell me about rivers",
        "Rivers are long.",
        "Which river is the longest",
    ]

    rows = await sync_to_async(_rows)(chat.pk)
    assert rows[q1] == ("user", None, "done")
    assert rows[a1] == ("assistant", q1, "done")
    assert rows[q2] == ("user", a1, "done")
    assert rows[a2] == ("assistant", q2, "done")
    assert rows[a2b] == ("assistant", q2, "done")

    llm_script.reply(text="On the new branch.")
    await _send(client, chat, "And the second", parent_id=a2b)
    assert _asked(llm_script) == [
        "Tell me about rivers",
        "Rivers are long.",
        "Which river is the longest",
        "Amazon, by some counts.",
        "And the second",
    ]
    llm_script.reply(text="Back on the first.")
    await _send(client, chat, "And the first", parent_id=a2)
    assert _asked(llm_script)[-3:] == [
        "Which river is the longest",
        "The Nile is longest.",
        "And the first",
    ]
    assert "Amazon, by some counts." not in _asked(llm_script)


async def test_an_edit_is_a_sibling_question_and_a_history_answer_is_cut_to_its_branch(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    for text in ("Old one.", "Old two.", "Edited two.", "Edited first."):
        llm_script.reply(text=text)
    q1, a1 = await _send(client, chat, "Question one")
    q2, a2 = await _send(client, chat, "Question two")
    q2b, a2b = await _send(client, chat, "Question two, edited", parent_id=a1)
    assert _asked(llm_script) == ["Question one", "Old one.", "Question two, edited"]
    q1b, _ = await _send(client, chat, "Question one, edited", parent_id=None)
    assert _asked(llm_script) == ["Question one, edited"]
    rows = await sync_to_async(_rows)(chat.pk)
    assert (rows[q2b][1], rows[a2b][1], rows[q1b][1]) == (a1, q2b, None)

    # The AI cache is gone: the client answers with every message it holds, both branches.
    await chat_cache.aredis_client().delete(chat_cache.ai_key(user.pk, chat.pk))
    llm_script.reply(text="Third.")
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content="Question three",
        parent_id=a2b,
    )
    asked = (await client.until("request_chat_history"))[-1]
    assert asked["expected_messages"] == 4
    texts = {
        q1: "Question one",
        a1: "Old one.",
        q2: "Question two",
        a2: "Old two.",
        q2b: "Question two, edited",
        a2b: "Edited two.",
    }
    await client.send(
        type="chat.history",
        chat_id=chat.pk,
        request_id=asked["request_id"],
        messages=[
            {"message_id": mid, "role": rows[mid][0], "content": text}
            for mid, text in texts.items()
        ],
    )
    done = (await client.until("stream.done"))[-1]
    assert done["status"] == "done"
    assert _asked(llm_script) == [
        "Question one",
        "Old one.",
        "Question two, edited",
        "Edited two.",
        "Question three",
    ]


async def _error(client: Any, **frame: Any) -> dict[str, Any]:
    await client.send(**frame)
    return (await client.until("error"))[-1]


async def test_bad_parents_and_regenerations_are_refused_with_stable_codes(
    ws_client, chat, chat_factory, user, stranger, llm_script
):
    client = await ws_client(user)
    llm_script.reply(text="Answer.")
    question, answer = await _send(client, chat, "Tell me about rivers")
    send = {"type": "message.send", "chat_id": chat.pk, "content": "Again"}

    unknown = await _error(client, **send, message_id=new_id(), parent_id=new_id())
    assert unknown["code"] == "not_found"
    not_an_answer = await _error(client, **send, message_id=new_id(), parent_id=question)
    assert not_an_answer["code"] == "invalid_frame"
    malformed = await _error(client, **send, message_id=new_id(), parent_id="nope")
    assert malformed["code"] == "invalid_frame"
    others = await sync_to_async(chat_factory)(stranger)
    elsewhere = await sync_to_async(_send_sync_stranger_answer)(others, stranger)
    foreign = await _error(client, **send, message_id=new_id(), parent_id=elsewhere)
    assert foreign["code"] == "not_found"
    assert len(await sync_to_async(_rows)(chat.pk)) == 2  # nothing was written

    regenerate = {"type": "message.regenerate", "chat_id": chat.pk, "content": "Again"}
    assert (await _error(client, **regenerate, message_id=new_id()))["code"] == "not_found"
    assert (await _error(client, **regenerate, message_id=question))["code"] == "not_found"
    assert (await _error(client, **regenerate, message_id=elsewhere))["code"] == "not_found"
    stranger_chat = {**regenerate, "chat_id": others.pk, "message_id": elsewhere}
    assert (await _error(client, **stranger_chat))["code"] == "not_found"
    no_content = {"type": "message.regenerate", "chat_id": chat.pk, "message_id": answer}
    assert (await _error(client, **no_content))["code"] == "invalid_frame"
    await sync_to_async(Message.objects.filter(pk=answer).update)(status="pending")
    running = await _error(client, **regenerate, message_id=answer)
    assert (running["code"], running["message_id"]) == ("conflict", answer)
    assert len(await sync_to_async(_rows)(chat.pk)) == 2


def _send_sync_stranger_answer(chat: Any, user: Any) -> str:
    """A done answer in another user's chat."""
    from chats import services

    question, answer = new_id(), new_id()
    services.turn_accept(chat=chat, user=user, message_id=question, assistant_message_id=answer)
    Message.objects.filter(pk__in=[question, answer]).update(status="done")
    return answer
