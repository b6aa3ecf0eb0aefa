"""The ``memory_search`` tool in a turn follows the chat's memory consent like the
prompt's retrieval (``memories.selectors.memory_categories_consented``); a chat's answers
outlive their Redis copy (``memories.models.MemoryConsent``); retrieval works on an
instance of the bundled base model. Real PostgreSQL with pgvector, Redis, OpenBao and the
packaged local embedder; the model scripted at the LiteLLM boundary (calling the tool) or
on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memories.models import MemoryConsent
from openmates import llm
from openmates.db import db_call
from pipeline import state
from tests.llm_fake import WireReply, sse_body
from tests.pipeline.test_memories import (
    MEMORY,
    POST,
    QUESTION,
    SAFE,
    TITLE,
    _main_prompts,
    _refused_after_first_turn,
    _remember,
    _turn,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ASK = "What do you know about me?"


def _search_script(llm_script: Any) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    call = {"id": "call_0", "name": "memory_search", "arguments": {"query": "food"}}
    llm_script.reply(tool_calls=[call], model="standard")
    llm_script.reply(text="Here is what I know.", model="standard")
    llm_script.reply(text=POST, model="fast")


def _tool_messages(llm_script: Any) -> list[str]:
    return [
        str(m["content"])
        for r in llm_script.requests
        if r.model == "standard"
        for m in r.messages
        if m.get("role") == "tool"
    ]


async def _search_turn(client: Any, chat: Any, llm_script: Any) -> str:
    """The memory_search result the model received in a turn asking ``ASK``."""
    _search_script(llm_script)
    frames = await _turn(client, chat, ASK)
    assert frames[-1]["type"] == "postprocess.done"
    (result,) = _tool_messages(llm_script)
    return result


@pytest.mark.parametrize(("allowed", "found"), [([], False), (["preference"], True)])
async def test_memory_search_returns_only_categories_the_chat_allows(
    ws_client: Any,
    chat: Any,
    user: Any,
    instance: Any,
    llm_script: Any,
    allowed: list[str],
    found: bool,
) -> None:
    await _remember(instance, user)
    client = await ws_client(user)
    # A change in the chat's UI: the list is the whole answer (docs/protocol.md §3).
    await client.send(type="memory.consent", chat_id=chat.pk, allowed=allowed)
    await _wait_answered(chat.pk)

    result = await _search_turn(client, chat, llm_script)

    assert (MEMORY in result) is found
    if not found:
        assert '"memories": []' in result


async def test_memory_search_finds_nothing_in_a_category_not_yet_answered(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    await _remember(instance, user)
    client = await ws_client(user)

    result = await _search_turn(client, chat, llm_script)

    assert MEMORY not in result
    assert '"memories": []' in result


async def _wait_answered(chat_id: str) -> None:
    """Until the chat's answers are stored (memory.consent has no reply frame)."""
    for _ in range(600):
        if await db_call(MemoryConsent.objects.filter(chat_id=chat_id).exists):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the consent answer was never stored")


async def test_a_refusal_outlives_the_chats_redis_copy(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    client = await _refused_after_first_turn(
        ws_client, chat, user, instance, llm_script, "Try a curry."
    )
    await _wait_answered(chat.pk)
    # The copy expired after 72 h, or was evicted with the chat from the AI cache.
    await state.redis_client().delete(state._consent_key(chat.pk))

    second = await _turn(client, chat, QUESTION)

    assert not any(f["type"] == "memory.request" for f in second)
    assert len(_main_prompts(llm_script)) == 2
    assert all(MEMORY not in prompt for prompt in _main_prompts(llm_script))
    assert await state.memory_consent_get(chat.pk) == {"preference": "denied"}
    stored = await db_call(lambda: list(MemoryConsent.objects.values_list("category", "decision")))
    assert stored == [("preference", "denied")]


async def test_a_memory_reaches_the_prompt_of_an_instance_on_the_bundled_model(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_wire: Any
) -> None:
    # The bundled base model behind a completions endpoint: the turn's one model call is
    # the answer; the memory's retrieval embeds locally and calls no model.
    instance.tier_map = {
        t: [{"model": "text-completion-openai/gemma-3-270m", "api_base": llm_wire.api_base}]
        for t in llm.TIERS
    }
    await db_call(instance.save)
    await _remember(instance, user)
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "g"}
    choice = {"index": 0, "text": " Pad thai.", "finish_reason": "stop"}
    llm_wire.queue(WireReply([sse_body([{**chunk, "choices": [choice]}])]))
    client = await ws_client(user)
    await client.send(type="memory.consent", chat_id=chat.pk, allowed=["preference"])
    await _wait_answered(chat.pk)

    frames = await _turn(client, chat, QUESTION)

    assert [f["content"] for f in frames if f["type"] == "stream.done"] == ["Pad thai."]
    (sent,) = llm_wire.requests
    assert sent["path"] == "/v1/completions"
    assert f"Facts about the person asking: {MEMORY}." in sent["body"]["prompt"]
