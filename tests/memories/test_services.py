"""Writing memories (memories.services): dedup, refused vectors, forget everything, account
deletion, and no plaintext at rest."""

from __future__ import annotations

import base64
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from accounts.services import account_delete
from memories import blind_index, keys, search, selectors, services, vectors
from memories.models import Memory, MemorySettings
from memories.vectors import VectorError, vector_check
from openmates import crypto, vault
from tests.db_rows import table_rows_text
from tests.memories.conftest import at_similarity, member, remember, unit, upsert

E1 = unit(1, 0, 0, 0)
E2 = unit(0, 1, 0, 0)
E3 = unit(0, 0, 1, 0)


def _key_exists(name: str) -> bool:
    try:
        vault.key_latest_version(name)
    except vault.VaultError as exc:
        if exc.reason == "not_found":
            return False
        raise
    return True


def _text(memory: Memory) -> str:
    ((_, text),) = selectors.memories_open(
        [Memory.objects.get(pk=memory.pk)], instance_id=memory.instance_id, user_id=memory.user_id
    )
    return text


def test_a_fact_at_similarity_091_updates_the_memory_it_repeats(
    scripted_instance: Any, llm_script: Any
) -> None:
    user = member(scripted_instance)
    llm_script.reply(embedding=[E1])
    llm_script.reply(embedding=[at_similarity(E1, E2, 0.91)])
    first = upsert(scripted_instance, user, "Likes green tea", "preference")

    second = upsert(scripted_instance, user, "Loves green tea in the morning", "preference")

    assert first.created
    assert not second.created
    assert second.memory.pk == first.memory.pk
    assert second.similarity == pytest.approx(0.91)
    assert Memory.objects.filter(user=user).count() == 1
    assert _text(second.memory) == "Loves green tea in the morning"


def test_a_fact_at_similarity_089_is_a_new_memory(scripted_instance: Any, llm_script: Any) -> None:
    user = member(scripted_instance)
    llm_script.reply(embedding=[E1])
    llm_script.reply(embedding=[at_similarity(E1, E2, 0.89)])
    first = upsert(scripted_instance, user, "Likes green tea", "preference")

    second = upsert(scripted_instance, user, "Likes black coffee", "preference")

    assert first.created
    assert second.created
    assert Memory.objects.filter(user=user).count() == 2


def test_dedup_never_merges_with_another_users_memory(
    scripted_instance: Any, llm_script: Any
) -> None:
    alice, bob = member(scripted_instance), member(scripted_instance)
    llm_script.reply(embedding=[E1])
    llm_script.reply(embedding=[E1])
    upsert(scripted_instance, alice, "Has a cat")

    written = upsert(scripted_instance, bob, "Has a cat")

    assert written.created
    assert Memory.objects.filter(user=alice).count() == Memory.objects.filter(user=bob).count() == 1


@pytest.mark.parametrize(
    ("vector", "error"),
    [
        ([0.0, 0.0, 0.0, 0.0], "zero_vector"),
        ([math.nan, 1.0, 0.0, 0.0], "non_finite"),
        ([math.inf, 1.0, 0.0, 0.0], "non_finite"),
    ],
)
def test_zero_and_non_finite_vectors_are_refused(
    scripted_instance: Any, llm_script: Any, vector: list[float], error: str
) -> None:
    user = member(scripted_instance)
    llm_script.reply(embedding=[vector])

    with pytest.raises(VectorError) as refused:
        upsert(scripted_instance, user, "Has a cat")

    assert refused.value.code == error
    assert not Memory.objects.exists()


def test_a_vector_of_the_wrong_dimension_is_refused(
    scripted_instance: Any, llm_script: Any
) -> None:
    user = member(scripted_instance)
    llm_script.reply(embedding=[[1.0, 0.0, 0.0]])

    with pytest.raises(VectorError, match="has 3 dimensions; this instance stores 4") as answered:
        remember(scripted_instance, user, "Has a cat")

    assert answered.value.code == "dimension_mismatch"
    assert not Memory.objects.exists()
    with pytest.raises(VectorError, match="has 3 dimensions; this instance stores 4") as refused:
        vector_check([1.0, 0.0, 0.0], dims=4)
    assert refused.value.code == "dimension_mismatch"


def test_content_and_category_are_checked_before_anything_is_embedded(
    scripted_instance: Any,
) -> None:
    user = member(scripted_instance)

    with pytest.raises(services.MemoryInputError, match="empty"):
        remember(scripted_instance, user, "   ")
    with pytest.raises(services.MemoryInputError, match="empty"):
        remember(scripted_instance, user, "\u200b \u2060\u202e")
    with pytest.raises(services.MemoryInputError, match="at most 2000"):
        remember(scripted_instance, user, "x" * 2001)
    with pytest.raises(services.MemoryInputError, match="category is one of"):
        remember(scripted_instance, user, "Has a cat", category="secret")
    assert not Memory.objects.exists()


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        ("Ich mag \u202eesäK\u202c und \u200bTee", "Ich mag esäK und Tee"),
        ("Likes tea\U000e0049\U000e0047\U000e004e", "Likes tea"),  # ASCII hidden in tags
        (
            "\u2067\u05e9\u05dc\u05d5\u05dd\u2069 means hello",
            "\u05e9\u05dc\u05d5\u05dd means hello",
        ),
        (
            "\U0001f469\u200d\U0001f4bb codes in \u0641\u0627\u0631\u0633\u06cc\u200c\u0647\u0627",
            None,
        ),
    ],
)
def test_hidden_characters_are_removed_and_joiners_kept(content: str, kept: str | None) -> None:
    assert services.content_clean(content) == (content if kept is None else kept)


def test_forget_everything_leaves_nothing_decryptable(
    local_instance: Any, alice: Any, bob: Any
) -> None:
    kept = remember(local_instance, bob, "Bob plays the cello")
    mine = [remember(local_instance, alice, f"Alice fact number {n}") for n in range(3)]
    old_key = selectors.current_key(instance_id=local_instance.pk, user_id=alice.pk)
    sealed = {str(m.pk): bytes(Memory.objects.get(pk=m.pk).content_sealed) for m in mine}
    assert old_key is not None

    deleted = services.memories_forget(instance_id=local_instance.pk, user_id=alice.pk)

    assert deleted == 3
    assert not Memory.objects.filter(user=alice).exists()
    assert not _key_exists(old_key)
    crypto.forget_key(old_key)
    for memory_id, value in sealed.items():
        with pytest.raises(crypto.DecryptionError):
            keys.content_open(key=old_key, user_id=alice.pk, memory_id=memory_id, sealed=value)
    with pytest.raises(vault.VaultError) as gone:
        keys.blind_secret(old_key)
    assert gone.value.reason == "not_found"
    assert _text(kept) == "Bob plays the cello"
    settings_row = MemorySettings.objects.get(instance=local_instance, user=alice)
    assert settings_row.key_generation == 2
    assert settings_row.enabled


def test_memories_written_after_forgetting_use_a_fresh_key(local_instance: Any, alice: Any) -> None:
    remember(local_instance, alice, "Alice likes sailing")
    services.memories_forget(instance_id=local_instance.pk, user_id=alice.pk)

    fresh = remember(local_instance, alice, "Alice likes climbing")

    key = selectors.current_key(instance_id=local_instance.pk, user_id=alice.pk)
    assert key == keys.key_name(instance_id=local_instance.pk, user_id=alice.pk, generation=2)
    assert _key_exists(key)
    hits = async_to_sync(search.ahybrid_search)(
        instance=local_instance, user_id=alice.pk, query="climbing"
    )
    assert [h.memory_id for h in hits] == [str(fresh.pk)]


def test_forgetting_with_vault_down_deletes_nothing(
    local_instance: Any, alice: Any, settings: Any
) -> None:
    remember(local_instance, alice, "Alice likes sailing")
    settings.VAULT_ADDR = "http://127.0.0.1:9"

    with pytest.raises(vault.VaultError):
        services.memories_forget(instance_id=local_instance.pk, user_id=alice.pk)

    assert Memory.objects.filter(user=alice).count() == 1
    assert MemorySettings.objects.get(user=alice).key_generation == 1


def test_account_deletion_shreds_the_memory_keys_of_every_instance(
    local_instance: Any, scripted_instance: Any, alice: Any, llm_script: Any
) -> None:
    from instances.models import InstanceMember

    InstanceMember.objects.create(instance=scripted_instance, user=alice)
    llm_script.reply(embedding=[E1])
    remember(local_instance, alice, "Alice likes sailing")
    remember(scripted_instance, alice, "Alice likes rowing")
    names = [
        selectors.current_key(instance_id=i.pk, user_id=alice.pk)
        for i in (local_instance, scripted_instance)
    ]
    assert all(name is not None and _key_exists(name) for name in names)

    account_delete(user=alice)

    assert not any(_key_exists(str(name)) for name in names)
    assert not Memory.objects.exists()
    assert not MemorySettings.objects.exists()


def _rows_as_text() -> str:
    """Every row of every table as PostgreSQL prints it (what a dump holds)."""
    return "\n".join(table_rows_text())


def test_no_word_of_a_memory_is_stored_in_plaintext(local_instance: Any, alice: Any) -> None:
    canary = "zanzibarquokka"
    memory = remember(local_instance, alice, f"The code word is {canary} and Kilimanjaro")

    dump = _rows_as_text().casefold()

    for word in (canary, "kilimanjaro", "code word"):
        assert word not in dump
        assert word.encode().hex() not in dump
        assert base64.b64encode(word.encode()).decode().casefold() not in dump
    stored = Memory.objects.get(pk=memory.pk)
    key = selectors.current_key(instance_id=local_instance.pk, user_id=alice.pk)
    secret = keys.blind_secret(str(key))
    assert blind_index.token(secret, f"w|{canary}") in stored.blind_index
    hits = async_to_sync(search.ahybrid_search)(
        instance=local_instance, user_id=alice.pk, query=canary
    )
    assert hits[0].memory_id == str(memory.pk)


def test_first_writes_of_a_new_instance_at_once_build_one_index(local_instance: Any) -> None:
    # The packaged embedder, not LiteLLM: each thread runs its own event loop, which
    # LiteLLM's logging worker does not allow.
    users = [member(local_instance) for _ in range(6)]
    start = threading.Barrier(len(users))

    def first_write(user: Any) -> str:
        start.wait()
        try:
            return str(remember(local_instance, user, "Has a cat").pk)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(len(users)) as pool:
        written = list(pool.map(first_write, users))

    assert len(set(written)) == len(users)
    assert Memory.objects.count() == len(users)
    assert vectors.vector_index_dims(local_instance.pk) == [384]
