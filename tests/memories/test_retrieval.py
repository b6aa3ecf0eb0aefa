"""Memories for a turn's prompt (memories.search.amemories_for_prompt, the retriever the
pipeline installs with ``memory_retriever_set``): allowed categories only, none when off."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from memories import search, services
from pipeline import prompts
from tests.memories.conftest import remember


def _retrieve(instance: Any, user: Any, query: str, categories: list[str]) -> list[str]:
    return async_to_sync(search.amemories_for_prompt)(
        user_id=user.pk, instance=instance, query=query, categories=categories
    )


def test_only_the_allowed_categories_reach_the_prompt(local_instance: Any, alice: Any) -> None:
    remember(local_instance, alice, "Alice is vegetarian", category="preference")
    remember(local_instance, alice, "Alice's brother is a chef", category="relationship")

    allowed = _retrieve(local_instance, alice, "what should I cook for dinner?", ["preference"])
    none = _retrieve(local_instance, alice, "what should I cook for dinner?", [])

    assert allowed == ["Alice is vegetarian"]
    assert none == []


def test_nothing_is_retrieved_when_the_user_or_the_instance_turns_memory_off(
    local_instance: Any, alice: Any
) -> None:
    remember(local_instance, alice, "Alice is vegetarian", category="preference")
    services.memory_settings_set(instance_id=local_instance.pk, user_id=alice.pk, enabled=False)
    user_off = _retrieve(local_instance, alice, "vegetarian", ["preference"])
    services.memory_settings_set(instance_id=local_instance.pk, user_id=alice.pk, enabled=True)
    local_instance.memory_enabled = False

    instance_off = _retrieve(local_instance, alice, "vegetarian", ["preference"])

    assert user_off == instance_off == []


def test_the_retrieved_memories_stay_within_the_budget(local_instance: Any, alice: Any) -> None:
    for n in range(5):
        remember(local_instance, alice, f"Alice likes tea number {n} " + "x" * 600)

    texts = _retrieve(local_instance, alice, "tea", ["fact"])

    assert len(texts) == 3
    assert sum(len(t) for t in texts) <= search.PROMPT_MEMORY_CHARS


def test_a_memory_below_the_relevance_floor_stays_out(local_instance: Any, alice: Any) -> None:
    remember(local_instance, alice, "Alice is vegetarian", category="preference")
    remember(local_instance, alice, "Alice collects stamps", category="preference")

    cooking = _retrieve(local_instance, alice, "what should I cook for dinner?", ["preference"])
    books = _retrieve(local_instance, alice, "recommend a book about Rome", ["preference"])

    assert cooking == ["Alice is vegetarian"]
    assert books == []


def _with_retriever(found: list[str] | Exception) -> list[str]:
    async def retriever(**_: Any) -> list[str]:
        if isinstance(found, Exception):
            raise found
        return found

    installed = prompts._memory_retriever
    prompts.memory_retriever_set(retriever)
    try:
        return async_to_sync(prompts.memories_retrieve)(
            user_id=1, instance=None, query="q", categories=["fact"]
        )
    finally:
        prompts.memory_retriever_set(installed)


def test_prompt_memories_stop_at_the_token_budget() -> None:
    # 400 ASCII characters estimate 100 tokens, plus 2 per line: four fit in 500.
    latin = [f"{n}" + "a" * 399 for n in range(6)]
    # One token per Japanese character: two of 200 fit (404), a third would not.
    japanese = ["猫" * 200, "犬" * 200, "鳥" * 200]

    assert [prompts.estimate_tokens(t) for t in latin[:1] + japanese[:1]] == [100, 200]
    assert _with_retriever(latin) == latin[:4]
    assert _with_retriever(japanese) == japanese[:2]
    assert _with_retriever(["short", "a" * 4000, "short again"]) == ["short"]
    assert _with_retriever(RuntimeError("the embedding model failed")) == []
