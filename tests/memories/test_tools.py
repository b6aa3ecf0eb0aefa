"""The tools ``memory_save`` and ``memory_search`` (skills/tools/), run through the executor."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from memories import services
from memories.models import Memory
from skills.executor import execute_tool
from skills.registry import ToolContext, get_tool


def _run(name: str, params: dict[str, Any], instance: Any, user: Any, chat: str = "") -> Any:
    context = ToolContext(instance_id=instance.pk, user_id=user.pk, chat_id=chat or None)
    return async_to_sync(execute_tool)(name, params, context)


def test_memory_save_is_registered_as_a_write_and_search_as_a_read() -> None:
    save, find = get_tool("memory_save"), get_tool("memory_search")

    assert save is not None
    assert find is not None
    assert save.idempotent is False
    assert find.idempotent is True
    assert save.required_secrets == find.required_secrets == ()
    assert save.parameters["required"] == ["content"]


def test_saving_twice_stores_the_fact_once_and_search_finds_it(
    local_instance: Any, alice: Any
) -> None:
    chat = "0190d0c4-1d5a-7c3e-8f00-000000000001"
    params = {"content": "Alice's daughter is called Mia", "category": "relationship"}

    first = _run("memory_save", params, local_instance, alice, chat)
    again = _run("memory_save", params, local_instance, alice, chat)
    found = _run("memory_search", {"query": "daughter"}, local_instance, alice)

    assert first["success"] is True
    assert first["result"]["status"] == "saved"
    assert again["result"] == {"id": first["result"]["id"], "status": "updated"}
    stored = Memory.objects.get()
    assert stored.source_chat_id == chat
    assert stored.category == "relationship"
    assert found["success"] is True
    assert found["result"]["query"] == "daughter"
    assert [m["content"] for m in found["result"]["memories"]] == [params["content"]]
    assert found["result"]["memories"][0]["category"] == "relationship"


def test_a_saved_memory_without_a_category_is_general(local_instance: Any, alice: Any) -> None:
    saved = _run("memory_save", {"content": "Alice lives in Lyon"}, local_instance, alice)

    assert saved["success"] is True
    assert Memory.objects.get().category == "general"


def test_search_never_shows_another_users_memories(
    local_instance: Any, alice: Any, bob: Any
) -> None:
    _run("memory_save", {"content": "Bob's cat is called Felix"}, local_instance, bob)

    found = _run("memory_search", {"query": "cat Felix"}, local_instance, alice)

    assert found == {"success": True, "result": {"query": "cat Felix", "memories": []}}


def test_the_tools_refuse_when_memory_is_off(local_instance: Any, alice: Any) -> None:
    services.memory_settings_set(instance_id=local_instance.pk, user_id=alice.pk, enabled=False)

    saved = _run("memory_save", {"content": "Alice lives in Lyon"}, local_instance, alice)
    found = _run("memory_search", {"query": "Lyon"}, local_instance, alice)

    assert saved == {"success": False, "error": "memory is turned off for this user"}
    assert found == saved
    assert not Memory.objects.exists()


def test_the_tools_refuse_when_the_instance_turns_memory_off(
    local_instance: Any, alice: Any
) -> None:
    local_instance.memory_enabled = False
    local_instance.save(update_fields=["memory_enabled"])

    saved = _run("memory_save", {"content": "Alice lives in Lyon"}, local_instance, alice)

    assert saved["success"] is False
    assert not Memory.objects.exists()


def test_bad_input_is_an_error_for_the_model_not_an_exception(
    local_instance: Any, alice: Any
) -> None:
    blank = _run("memory_save", {"content": "   "}, local_instance, alice)
    category = _run("memory_save", {"content": "x", "category": "secret"}, local_instance, alice)
    empty = _run("memory_search", {"query": " "}, local_instance, alice)

    assert blank == {"success": False, "error": "a memory's content is empty"}
    assert category["success"] is False
    assert category["error"].startswith("invalid category")
    assert empty == {"success": False, "error": "the query is empty"}


def test_an_embedding_failure_is_reported_to_the_model(
    scripted_instance: Any, llm_script: Any
) -> None:
    from tests.memories.conftest import member

    user = member(scripted_instance)
    llm_script.reply(error=503)

    llm_script.reply(embedding=[[1.0, 0.0, 0.0]])
    llm_script.reply(embedding=[[1.0, 0.0, 0.0]])

    saved = _run("memory_save", {"content": "Likes tea"}, scripted_instance, user)
    short = _run("memory_save", {"content": "Likes tea"}, scripted_instance, user)
    searched = _run("memory_search", {"query": "tea"}, scripted_instance, user)

    assert saved == {"success": False, "error": "the embedding model is unavailable"}
    wrong = "the embedding has 3 dimensions; this instance stores 4"
    unusable = {
        "success": False,
        "error": f"the embedding model answered an unusable vector: {wrong}",
    }
    assert short == unusable
    assert searched == unusable
