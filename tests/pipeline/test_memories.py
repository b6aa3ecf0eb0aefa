"""Memories in a turn over /ws/chat/ (docs/architecture.md §12): ``memory.request`` only for
categories the user has memories in, the retrieved memories in the main model's prompt
once allowed, none when refused (real PostgreSQL with pgvector, Redis, OpenBao, the
packaged local embedder; the model scripted at the LiteLLM boundary)."""

from __future__ import annotations

from typing import Any

import pytest

from memories import services
from pipeline import prompts, state
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Dinner", "icon": "chat", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
MEMORY = "The user is vegetarian and loves Thai food"
# Wants the "preference" category (preprocess.memory_categories).
QUESTION = "Can you recommend a dinner recipe for tonight?"


def _first_turn_script(llm_script: Any, answer: str) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=answer, model="standard")
    llm_script.reply(text=POST, model="fast")


def _main_prompts(llm_script: Any) -> list[str]:
    """The system prompt of every main-model call, in order."""
    return [
        str(r.messages[0]["content"])
        for r in llm_script.requests
        if r.model == "standard" and r.messages and r.messages[0].get("role") == "system"
    ]


async def _turn(client: Any, chat: Any, content: str) -> list[dict[str, Any]]:
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content=content)
    return await client.until("postprocess.done", wait_s=60)


async def _remember(instance: Any, user: Any) -> None:
    await services.amemory_create(
        instance=instance, user_id=user.pk, category="preference", content=MEMORY
    )


async def _refused_after_first_turn(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any, follow_up: str
) -> Any:
    """A user with a remembered preference asks :data:`QUESTION`, gets its
    ``memory.request`` and refuses every category; the next turn is scripted to answer
    ``follow_up``. Returns the socket client."""
    await _remember(instance, user)
    _first_turn_script(llm_script, "Here is a recipe.")
    llm_script.reply(text=follow_up, model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)
    first = await _turn(client, chat, QUESTION)
    request = next(f for f in first if f["type"] == "memory.request")
    await client.send(
        type="memory.consent", chat_id=chat.pk, request_id=request["request_id"], allowed=[]
    )
    return client


def test_the_memories_retriever_is_installed_at_start_up() -> None:
    from memories.search import amemories_for_prompt

    assert prompts._memory_retriever is amemories_for_prompt


async def test_an_allowed_memory_reaches_the_main_models_prompt(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    await _remember(instance, user)
    _first_turn_script(llm_script, "Here is a recipe.")
    llm_script.reply(text="Try a green curry.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)

    first = await _turn(client, chat, QUESTION)
    request = next(f for f in first if f["type"] == "memory.request")
    await client.send(
        type="memory.consent",
        chat_id=chat.pk,
        request_id=request["request_id"],
        allowed=["preference"],
    )
    second = await _turn(client, chat, QUESTION)

    assert request["categories"] == ["preference"]
    assert not any(f["type"] == "memory.request" for f in second)
    before, after = _main_prompts(llm_script)
    assert MEMORY not in before  # the first turn went on without waiting for the answer
    assert f"- {MEMORY}" in after
    assert await state.memory_consent_get(chat.pk) == {"preference": "allowed"}


async def test_a_refused_memory_stays_out_of_the_prompt(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    client = await _refused_after_first_turn(
        ws_client, chat, user, instance, llm_script, "Try a curry."
    )
    second = await _turn(client, chat, QUESTION)

    assert not any(f["type"] == "memory.request" for f in second)
    assert all(MEMORY not in prompt for prompt in _main_prompts(llm_script))
    assert len(_main_prompts(llm_script)) == 2
    assert await state.memory_consent_get(chat.pk) == {"preference": "denied"}


async def test_no_memory_request_for_a_user_without_memories(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    _first_turn_script(llm_script, "Here is a recipe.")
    client = await ws_client(user)

    frames = await _turn(client, chat, QUESTION)

    assert [f["type"] for f in frames if f["type"] == "memory.request"] == []
    assert any(f["type"] == "stream.done" and f["status"] == "done" for f in frames)
    assert await state.memory_consent_get(chat.pk) == {}


async def test_no_memory_request_when_the_user_turned_memory_off(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    await _remember(instance, user)
    await services_settings_off(instance, user)
    _first_turn_script(llm_script, "Here is a recipe.")
    client = await ws_client(user)

    frames = await _turn(client, chat, QUESTION)

    assert not any(f["type"] == "memory.request" for f in frames)
    assert all(MEMORY not in prompt for prompt in _main_prompts(llm_script))


async def services_settings_off(instance: Any, user: Any) -> None:
    from openmates.db import db_call

    await db_call(
        services.memory_settings_set, instance_id=instance.pk, user_id=user.pk, enabled=False
    )


FACTS = '{"facts": [{"category": "preference", "content": "The user is vegetarian."}]}'


async def test_postprocess_done_reports_the_memories_extraction_saved(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any, memory_extraction: Any
) -> None:
    _first_turn_script(llm_script, "Noted: no meat.")
    llm_script.reply(text=FACTS, model="fast")  # the extraction call, after the one above
    client = await ws_client(user)

    frames = await _turn(client, chat, "I'm vegetarian, remember that please.")

    kinds = [f["type"] for f in frames]
    post = frames[-1]
    assert kinds.index("stream.done") < kinds.index("postprocess.done")
    assert post["memories_saved"] == 1
    texts = await _texts(instance, user)
    assert texts == ["The user is vegetarian."]
    extraction = [r for r in llm_script.requests if r.model == "fast"][-1]
    assert "sentence about the user in English" in extraction.messages[0]["content"]


async def test_no_extraction_call_when_the_user_turned_memory_off(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any, memory_extraction: Any
) -> None:
    await services_settings_off(instance, user)
    _first_turn_script(llm_script, "Noted.")
    client = await ws_client(user)

    frames = await _turn(client, chat, "I'm vegetarian, remember that please.")

    assert frames[-1]["memories_saved"] == 0
    assert len([r for r in llm_script.requests if r.model == "fast"]) == 3
    assert await _texts(instance, user) == []


async def _texts(instance: Any, user: Any) -> list[str]:
    from memories import selectors
    from openmates.db import db_call

    def read() -> list[str]:
        rows = list(selectors.memories_for_user(instance_id=instance.pk, user_id=user.pk))
        opened = selectors.memories_open(rows, instance_id=instance.pk, user_id=user.pk)
        return [text for _, text in opened]

    return await db_call(read)
