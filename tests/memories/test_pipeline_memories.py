"""Memories' hooks into a turn (docs/architecture.md §12): extraction after ``stream.done``
(``memories.extractor.amemories_extract``, the hook ``pipeline.apps`` installs) and the
crypto-shred of an instance's memory keys when it is deleted. Real PostgreSQL with
pgvector and OpenBao, the packaged local embedder, the fast model scripted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from instances.models import Instance
from instances.services import instance_delete
from memories import keys, selectors, services
from memories.extractor import amemories_extract
from memories.models import Memory, MemorySettings
from openmates import crypto, vault
from pipeline import postprocess
from tests.memories.conftest import member, remember

CONVERSATION = [
    {"role": "user", "content": "Ich bin Vegetarierin und wohne in Hamburg. Was koche ich heute?"},
    {"role": "assistant", "content": "Wie wäre es mit einem Linsencurry?"},
]
FACTS = {
    "facts": [
        {"category": "preference", "content": "Die Nutzerin ist Vegetarierin."},
        {"category": "fact", "content": "Die Nutzerin wohnt in Hamburg."},
        {"category": "fact", "content": "  die nutzerin wohnt in hamburg. "},
        {"category": "unknown", "content": "Left out: no such category."},
    ]
}
CHAT_ID = "0190f0e8-7a2b-7c3d-8e4f-a1b2c3d4e5f6"


def _extract(instance: Any, user: Any, language: str = "German") -> int:
    return async_to_sync(amemories_extract)(
        user_id=user.pk,
        instance=instance,
        chat_id=CHAT_ID,
        messages=CONVERSATION,
        language=language,
    )


def _texts(instance: Any, user: Any) -> list[tuple[str, str]]:
    rows = list(selectors.memories_for_user(instance_id=instance.pk, user_id=user.pk))
    opened = selectors.memories_open(rows, instance_id=instance.pk, user_id=user.pk)
    return sorted((memory.category, text) for memory, text in opened)


def test_the_extraction_hook_is_installed_at_start_up(memory_extraction: Any) -> None:
    assert memory_extraction is amemories_extract
    assert postprocess._memory_extractor is amemories_extract


def test_a_conversation_extracted_twice_stores_its_facts_once(
    local_instance: Instance, alice: Any, llm_script: Any
) -> None:
    llm_script.reply(text=json.dumps(FACTS), model="fast")
    llm_script.reply(text=json.dumps(FACTS), model="fast")

    first = _extract(local_instance, alice)
    second = _extract(local_instance, alice)

    assert (first, second) == (2, 2)  # the second run updates the two it stored
    assert _texts(local_instance, alice) == [
        ("fact", "Die Nutzerin wohnt in Hamburg."),
        ("preference", "Die Nutzerin ist Vegetarierin."),
    ]
    assert Memory.objects.get(category="fact").source_chat_id == CHAT_ID
    sent = [r for r in llm_script.requests if r.model == "fast"]
    assert len(sent) == 2
    system, transcript = sent[0].messages[0]["content"], sent[0].messages[1]["content"]
    assert "sentence about the user in German" in system
    assert transcript.startswith("user: Ich bin Vegetarierin")
    assert "assistant: Wie wäre es" in transcript


def test_no_call_when_the_user_turned_memory_off(
    local_instance: Instance, alice: Any, llm_script: Any
) -> None:
    services.memory_settings_set(instance_id=local_instance.pk, user_id=alice.pk, enabled=False)

    saved = _extract(local_instance, alice)

    assert saved == 0
    assert llm_script.requests == []
    assert Memory.objects.count() == 0


def test_no_call_when_the_instance_has_memory_off(
    local_instance: Instance, alice: Any, llm_script: Any
) -> None:
    local_instance.memory_enabled = False

    saved = _extract(local_instance, alice)

    assert (saved, llm_script.requests, Memory.objects.count()) == (0, [], 0)


def test_no_call_for_an_instance_on_the_bundled_local_model(
    local_instance: Instance, alice: Any, llm_script: Any
) -> None:
    # The bundled model is a base model behind a completions endpoint (openmates.llm).
    local_instance.tier_map = {
        tier: [{"model": "text-completion-openai/gemma", "api_base": "http://127.0.0.1:9/v1"}]
        for tier in ("fast", "standard", "heavy")
    }

    saved = _extract(local_instance, alice)

    assert (saved, llm_script.requests, Memory.objects.count()) == (0, [], 0)


def test_a_bad_answer_stores_nothing_and_raises_for_postprocessing_to_log(
    local_instance: Instance, alice: Any, llm_script: Any
) -> None:
    from memories.extraction import ExtractionFormatError

    llm_script.reply(text='{"summary": "not facts"}', model="fast")

    with pytest.raises(ExtractionFormatError):
        _extract(local_instance, alice)

    assert Memory.objects.count() == 0


def _key_exists(name: str) -> bool:
    try:
        vault.key_latest_version(name)
    except vault.VaultError as exc:
        if exc.reason == "not_found":
            return False
        raise
    return True


def test_deleting_an_instance_shreds_its_users_memory_keys(
    local_instance: Instance, alice: Any, bob: Any
) -> None:
    other = Instance.objects.create(slug="kept-instance", name="Kept")
    carol = member(other, "carol")
    mine = {
        user.pk: remember(local_instance, user, f"{user.username} likes tea")
        for user in (alice, bob)
    }
    remember(other, carol, "carol likes coffee")
    names = {
        user_id: str(selectors.current_key(instance_id=local_instance.pk, user_id=user_id))
        for user_id in mine
    }
    sealed = {user_id: bytes(memory.content_sealed) for user_id, memory in mine.items()}
    assert all(_key_exists(name) for name in names.values())

    instance_delete(instance=local_instance)

    assert not any(_key_exists(name) for name in names.values())
    assert not MemorySettings.objects.filter(instance_id=local_instance.pk).exists()
    for user_id, memory in mine.items():
        with pytest.raises(crypto.DecryptionError):
            keys.content_open(
                key=names[user_id],
                user_id=user_id,
                memory_id=str(memory.pk),
                sealed=sealed[user_id],
            )
        with pytest.raises(vault.VaultError) as gone:
            keys.blind_secret(names[user_id])
        assert gone.value.reason == "not_found"
    assert _texts(other, carol) == [("fact", "carol likes coffee")]
