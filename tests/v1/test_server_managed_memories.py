"""Memories in server-managed turns (``/v1``, ``manage.py chat``, channels;
docs/architecture.md §12): with no client to ask, a category the user has memories in
is used without ``memory.request``, unless it was refused for the conversation.
In-process (``pipeline.server_turn``), real PostgreSQL with pgvector, Redis, OpenBao and
the packaged local embedder; the model scripted at the LiteLLM boundary."""

from __future__ import annotations

from typing import Any

import pytest

from memories import services
from openmates.db import db_call
from pipeline import events as ev
from pipeline import state
from pipeline.server_turn import ServerTurn, ServerTurnInput, server_turn_start

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("inprocess_turns"),
]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Dinner", "icon": "chat", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
MEMORY = "The user is vegetarian and loves Thai food"
# Wants the "preference" category (pipeline.preprocess.memory_categories).
QUESTION = "Can you recommend a dinner recipe for tonight?"


def _script(llm_script: Any, *, first: bool) -> None:
    llm_script.reply(text=SAFE, model="fast")
    if first:
        llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Try a green curry.", model="standard")
    llm_script.reply(text=POST, model="fast")


def _main_prompts(llm_script: Any) -> list[str]:
    return [
        str(r.messages[0]["content"])
        for r in llm_script.requests
        if r.model == "standard" and r.messages and r.messages[0].get("role") == "system"
    ]


async def _turn(
    instance: Any, user: Any, conversation_id: str | None = None, text: str = QUESTION
) -> tuple[ServerTurn, list[ev.ServerEvent]]:
    turn = await server_turn_start(
        ServerTurnInput(
            instance=instance,
            user_id=user.pk,
            role="member",
            text=text,
            conversation_id=conversation_id,
        )
    )
    return turn, [event async for event in turn.events()]


async def test_a_server_managed_turn_uses_the_users_memories_without_asking(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category="preference", content=MEMORY
    )
    _script(llm_script, first=True)

    turn, events = await _turn(instance, owner)

    assert not any(isinstance(e, ev.MemoryRequest) for e in events)
    assert turn.final is not None
    assert turn.final.status == "done"
    (prompt,) = _main_prompts(llm_script)
    assert f"- {MEMORY}" in prompt
    assert await state.memory_consent_get(turn.conversation_id) == {}


async def test_a_category_refused_for_the_conversation_stays_out_of_its_prompt(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category="preference", content=MEMORY
    )
    _script(llm_script, first=True)
    _script(llm_script, first=False)
    first, _ = await _turn(instance, owner)
    # As a browser's memory.consent for this chat records it (docs/protocol.md §3).
    await state.memory_consent_mark(first.conversation_id, {"preference": "denied"})

    second, events = await _turn(instance, owner, first.conversation_id)

    assert second.conversation_id == first.conversation_id
    assert not any(isinstance(e, ev.MemoryRequest) for e in events)
    before, after = _main_prompts(llm_script)
    assert f"- {MEMORY}" in before
    assert MEMORY not in after


async def test_a_refusal_outlives_the_conversations_redis_copy(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category="preference", content=MEMORY
    )
    _script(llm_script, first=True)
    _script(llm_script, first=False)
    first, _ = await _turn(instance, owner)
    # What the WebSocket handler of memory.consent records (docs/protocol.md §3).
    await state.memory_consent_answer(
        chat_id=first.conversation_id, user_id=owner.pk, answers={"preference": "denied"}
    )
    # The copy expired after 72 h, or was evicted with the chat from the AI cache.
    await state.redis_client().delete(state._consent_key(first.conversation_id))

    _, events = await _turn(instance, owner, first.conversation_id)

    assert not any(isinstance(e, ev.MemoryRequest) for e in events)
    before, after = _main_prompts(llm_script)
    assert f"- {MEMORY}" in before
    assert MEMORY not in after
    assert await state.memory_consent_get(first.conversation_id) == {"preference": "denied"}


async def test_no_memory_reaches_the_prompt_when_the_user_turned_memory_off(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category="preference", content=MEMORY
    )
    await db_call(
        services.memory_settings_set, instance_id=instance.pk, user_id=owner.pk, enabled=False
    )
    _script(llm_script, first=True)

    await _turn(instance, owner)

    (prompt,) = _main_prompts(llm_script)
    assert MEMORY not in prompt


# (message, memory, its category): a message in German or Japanese draws on a memory
# in its language; a memory saved without a category (``general``) is drawn on too.
RELEVANT = [
    ("Weißt du noch, wie mein Hund heißt?", "Mein Hund heißt Bello.", "general"),
    ("おすすめの飲み物は何ですか？", "私はコーヒーが好きです。", "preference"),  # noqa: RUF001
    ("What do you remember about my dog?", "My dog is called Bello.", "general"),
]


@pytest.mark.parametrize(("text", "memory", "category"), RELEVANT)
async def test_a_relevant_memory_reaches_the_prompt_in_any_language(
    instance: Any, owner: Any, llm_script: Any, text: str, memory: str, category: str
) -> None:
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category=category, content=memory
    )
    # Of the same category, about something else: below the relevance floor.
    await services.amemory_create(
        instance=instance, user_id=owner.pk, category=category, content="The user owns a bakery."
    )
    _script(llm_script, first=True)

    await _turn(instance, owner, text=text)

    (prompt,) = _main_prompts(llm_script)
    assert f"- {memory}" in prompt
    assert "bakery" not in prompt


# A message that wants no memory, and one that wants a preference none of whose
# memories is about it (below the relevance floor).
UNRELATED = ["How do I reverse a list in Python?", "Can you recommend a book about Rome?"]


@pytest.mark.parametrize("text", UNRELATED)
async def test_an_unrelated_message_pulls_in_no_memory(
    instance: Any, owner: Any, llm_script: Any, text: str
) -> None:
    for category, content in (("preference", MEMORY), ("general", "My dog is called Bello.")):
        await services.amemory_create(
            instance=instance, user_id=owner.pk, category=category, content=content
        )
    _script(llm_script, first=True)

    await _turn(instance, owner, text=text)

    (prompt,) = _main_prompts(llm_script)
    assert MEMORY not in prompt
    assert "Bello" not in prompt
    assert "What you remember about the user" not in prompt
