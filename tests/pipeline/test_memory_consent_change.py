"""A memory consent changed in the chat's UI (``memory.consent`` without ``request_id``,
docs/protocol.md §3): the list replaces the chat's answers, and the next turn follows it
(real PostgreSQL with pgvector, Redis, OpenBao, the packaged local embedder; the model
scripted at the LiteLLM boundary)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline import state
from tests.pipeline.test_memories import (
    MEMORY,
    QUESTION,
    _main_prompts,
    _refused_after_first_turn,
    _turn,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


async def test_a_refusal_changed_later_lets_the_memory_into_the_next_prompt(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    client = await _refused_after_first_turn(
        ws_client, chat, user, instance, llm_script, "Try a green curry."
    )

    await client.send(type="memory.consent", chat_id=chat.pk, allowed=["preference", "fact"])
    second = await _turn(client, chat, QUESTION)

    assert not any(f["type"] in ("memory.request", "error") for f in second)
    assert await state.memory_consent_get(chat.pk) == {
        "preference": "allowed",
        "fact": "allowed",
        "event": "denied",
        "relationship": "denied",
        "decision": "denied",
        "general": "denied",
    }
    before, after = _main_prompts(llm_script)
    assert MEMORY not in before
    assert f"- {MEMORY}" in after


async def test_a_change_to_nothing_denies_every_category_of_the_chat(
    ws_client: Any, chat: Any, user: Any
) -> None:
    client = await ws_client(user)
    await client.send(type="memory.consent", chat_id=chat.pk, allowed=["decision"])
    await client.send(type="memory.consent", chat_id=chat.pk, allowed=[])
    await client.send(type="ping", ts=1)
    frames = await client.until("pong", wait_s=10)

    answers = await state.memory_consent_get(chat.pk)

    assert [f for f in frames if f["type"] == "error"] == []
    assert answers == dict.fromkeys(
        ["preference", "fact", "event", "relationship", "decision", "general"], "denied"
    )
