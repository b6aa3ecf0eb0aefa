"""Titles of server-managed conversations (``/v1``, channels): a conversation that
arrives with earlier messages is titled from its first user message, once; its title is
in every chat object the owner reads (sync, ``GET /api/chats/``, ``GET
/api/chats/{id}/``). In-process (``pipeline.server_turn``), the model scripted at the
LiteLLM boundary."""

from __future__ import annotations

from typing import Any

import pytest

from chats.models import Chat
from chats.sync import chat_metadata
from openmates.db import db_call
from pipeline.server_turn import ServerTurn, ServerTurnInput, server_turn_start

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("inprocess_turns"),
]

POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
SEEDED = (
    {"role": "user", "content": "Plan a **three-day** trip to Lisbon for two"},
    {"role": "assistant", "content": "Day one: Alfama and the castle."},
)


async def _turn(instance: Any, user: Any, **given: Any) -> ServerTurn:
    turn = await server_turn_start(
        ServerTurnInput(instance=instance, user_id=user.pk, role="member", **given)
    )
    assert [e async for e in turn.events()]
    assert turn.final is not None
    assert turn.final.status == "done"
    return turn


def _metadata(chat_id: str) -> dict[str, Any]:
    return chat_metadata(Chat.objects.select_related("instance").get(pk=chat_id))


async def test_a_seeded_conversation_is_titled_from_its_first_user_message(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    await db_call(
        type(instance).objects.filter(pk=instance.pk).update,
        **{"model_preprocessing_enabled": False},
    )
    await db_call(instance.refresh_from_db)
    llm_script.reply(text="Day two: Belém.", model="standard")
    llm_script.reply(text=POST, model="fast")

    turn = await _turn(instance, owner, text="And day two?", history=SEEDED)

    chat = await db_call(_metadata, turn.conversation_id)
    # The heuristic title (model pre-processing is off): markdown stripped, first words.
    assert chat["title"] == "Plan a three-day trip to Lisbon for two"


async def test_the_model_titles_a_seeded_conversation_once(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    # No safety call: a seeded conversation's turn is no first message (pipeline.turn).
    llm_script.reply(
        text='{"title": "Lisbon trip", "icon": "chat", "category": "travel", "tags": []}',
        model="fast",
    )
    llm_script.reply(text="Day two: Belém.", model="standard")
    llm_script.reply(text=POST, model="fast")
    first = await _turn(instance, owner, text="And day two?", history=SEEDED)
    title_calls = [r for r in llm_script.requests if "Lisbon" in str(r.messages)]
    assert any("three-day" in str(r.messages) for r in title_calls if r.model == "fast")

    llm_script.reply(text="Day three: Sintra.", model="standard")
    llm_script.reply(text=POST, model="fast")
    before = len(llm_script.requests)
    await _turn(instance, owner, text="And day three?", conversation_id=first.conversation_id)

    later = llm_script.requests[before:]
    assert [r.model for r in later] == ["standard", "fast"]  # no title call again
    chat = await db_call(_metadata, first.conversation_id)
    assert chat["title"] == "Lisbon trip"
