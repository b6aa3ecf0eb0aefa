"""Hybrid search (memories.search): reciprocal rank fusion checked by hand, the tricky
queries, languages without spaces, and owner isolation among 10,000 other memories."""

from __future__ import annotations

import os
import random
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from memories import blind_index, keys, search, selectors, vectors
from memories.models import Memory
from tests.memories.conftest import at_similarity, member, remember, unit

E1 = unit(1, 0, 0, 0)
E2 = unit(0, 1, 0, 0)
E3 = unit(0, 0, 1, 0)


def test_rrf_with_one_list_empty_is_that_lists_reciprocal_ranks() -> None:
    fused = search.rrf_fuse([["a", "b", "c"], []])

    assert fused == [("a", 1 / 61), ("b", 1 / 62), ("c", 1 / 63)]
    assert search.rrf_fuse([[], []]) == []


def test_rrf_adds_up_a_document_found_by_both_lists() -> None:
    fused = search.rrf_fuse([["a", "b", "c"], ["c", "d"]])

    assert fused == [
        ("c", pytest.approx(1 / 63 + 1 / 61)),
        ("a", 1 / 61),
        ("b", 1 / 62),
        ("d", 1 / 62),
    ]
    assert fused[0][1] == pytest.approx(0.0322665, abs=1e-7)


def test_rrf_counts_a_repeat_within_one_list_once_at_its_best_rank() -> None:
    assert search.rrf_fuse([["a", "b", "a"]]) == [("a", 1 / 61), ("b", 1 / 62)]


def _search(instance: Any, user: Any, query: str, **kwargs: Any) -> list[search.SearchHit]:
    return async_to_sync(search.ahybrid_search)(
        instance=instance, user_id=user.pk, query=query, **kwargs
    )


def test_hybrid_scores_are_the_fused_ranks_of_both_lists(
    scripted_instance: Any, llm_script: Any
) -> None:
    user = member(scripted_instance)
    for vector in (E1, at_similarity(E1, E2, 0.8), E3):
        llm_script.reply(embedding=[vector])
    apples = remember(scripted_instance, user, "apples and pears")
    tea = remember(scripted_instance, user, "green tea every day")
    coffee = remember(scripted_instance, user, "black coffee")
    llm_script.reply(embedding=[E1])
    llm_script.reply(embedding=[E1])

    both = _search(scripted_instance, user, "tea")
    vector_only = _search(scripted_instance, user, "zebra")

    # Vector ranks: apples 1, tea 2, coffee 3; keyword: tea 1.
    assert [(h.memory_id, h.score) for h in both] == [
        (str(tea.pk), pytest.approx(1 / 62 + 1 / 61)),
        (str(apples.pk), pytest.approx(1 / 61)),
        (str(coffee.pk), pytest.approx(1 / 63)),
    ]
    assert [(h.memory_id, h.score) for h in vector_only] == [
        (str(apples.pk), pytest.approx(1 / 61)),
        (str(tea.pk), pytest.approx(1 / 62)),
        (str(coffee.pk), pytest.approx(1 / 63)),
    ]
    assert both[0].content == "green tea every day"
    assert [r.input for r in llm_script.requests[-2:]] == [["tea"], ["zebra"]]


MEMORIES = {
    "black": "I drink black coffee every morning",
    "decaf": "I switched to decaf coffee in the evening",
    "tea": "My favourite drink is green tea",
    "scattered": "Tea is green when it is fresh",
    "door": "The green door of our house",
    "tokyo": "東京タワーに行った",
    "chinese": "我喜欢喝绿茶",
    "mail": "My e-mail password is on the fridge",
}


@pytest.fixture
def corpus(local_instance: Any, alice: Any) -> dict[str, str]:
    """Alice's memories by name → id."""
    return {name: str(remember(local_instance, alice, text).pk) for name, text in MEMORIES.items()}


def _keyword(instance: Any, user: Any, query: str) -> list[str]:
    key = selectors.current_key(instance_id=instance.pk, user_id=user.pk)
    with transaction.atomic():
        return search.keyword_ranked(
            instance_id=instance.pk,
            user_id=user.pk,
            query=blind_index.parse_query(query),
            secret=keys.blind_secret(str(key)),
        )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("coffee", {"black", "decaf"}),
        ("COFFEE", {"black", "decaf"}),
        ("coffee -decaf", {"black"}),
        ('"green tea"', {"tea"}),
        ("green tea", {"tea", "scattered"}),
        ('green -"green tea"', {"scattered", "door"}),
        ("coffee or tea", {"black", "decaf", "tea", "scattered"}),
        ('decaf or "green tea"', {"decaf", "tea"}),
        ("coffee or", set()),
        ("東京", {"tokyo"}),
        ("タワー", {"tokyo"}),
        ("绿茶", {"chinese"}),
        ("茶", {"chinese"}),
        ("e-mail", {"mail"}),
        ('"e mail"', {"mail"}),
    ],
)
def test_tricky_queries_match_the_documented_memories(
    local_instance: Any, alice: Any, corpus: dict[str, str], query: str, expected: set[str]
) -> None:
    found = _keyword(local_instance, alice, query)

    assert sorted(found) == sorted(corpus[name] for name in expected)


def test_keyword_results_rank_by_the_query_terms_they_hold(
    local_instance: Any, alice: Any, corpus: dict[str, str]
) -> None:
    found = _keyword(local_instance, alice, "coffee or morning")

    assert found == [corpus["black"], corpus["decaf"]]


@pytest.mark.parametrize("query", ["", "   ", "!!! ...", "😀 🎉", "-coffee", '-"green tea"'])
def test_queries_with_nothing_to_look_for_find_nothing(
    local_instance: Any, alice: Any, corpus: dict[str, str], query: str, llm_script: Any
) -> None:
    assert _keyword(local_instance, alice, query) == []
    assert _search(local_instance, alice, query) == []


def test_exclusions_hold_for_the_vector_side_too(
    local_instance: Any, alice: Any, corpus: dict[str, str]
) -> None:
    hits = _search(local_instance, alice, "coffee -decaf")

    assert corpus["decaf"] not in [h.memory_id for h in hits]
    assert hits[0].memory_id == corpus["black"]
    assert len(hits) == len(MEMORIES) - 1


def test_the_vector_side_finds_meaning_without_shared_words(
    local_instance: Any, alice: Any, corpus: dict[str, str]
) -> None:
    hits = _search(local_instance, alice, "espresso", limit=2)

    assert corpus["black"] in [h.memory_id for h in hits]
    assert len(hits) == 2


def test_a_category_filter_keeps_to_that_category(local_instance: Any, alice: Any) -> None:
    remember(local_instance, alice, "Prefers tea", category="preference")
    fact = remember(local_instance, alice, "Has tea plants", category="fact")

    hits = _search(local_instance, alice, "tea", categories=["fact"])

    assert [h.memory_id for h in hits] == [str(fact.pk)]


def test_a_user_without_memories_finds_nothing_and_embeds_nothing(
    local_instance: Any, alice: Any, llm_script: Any
) -> None:
    assert _search(local_instance, alice, "coffee") == []


def _others(instance: Any, count: int, near: list[float] | None, tokens: list[int]) -> None:
    """``count`` memories of 50 other users holding ``tokens``: around ``near`` (closer
    to it than any of the owner's), or spread evenly over the sphere when None."""
    users = [member(instance) for _ in range(50)]
    rng = random.Random(7)
    rows = []
    for n in range(count):
        noise = [rng.gauss(0, 1) if near is None else x + rng.gauss(0, 0.02) for x in near or E1]
        rows.append(
            Memory(
                id=uuid.uuid4(),
                instance=instance,
                user=users[n % len(users)],
                category="fact",
                content_sealed=os.urandom(64),
                embedding=unit(*noise),
                embedding_model=instance.embedding_model,
                blind_index=tokens,
            )
        )
    Memory.objects.bulk_create(rows, batch_size=2000)


def test_other_users_memories_never_appear_among_10000(
    scripted_instance: Any, llm_script: Any
) -> None:
    owner = member(scripted_instance)
    mine = []
    for vector in (E2, E3, unit(0, 0, 0, 1)):
        llm_script.reply(embedding=[vector])
        mine.append(str(remember(scripted_instance, owner, "green tea with friends").pk))
    key = str(selectors.current_key(instance_id=scripted_instance.pk, user_id=owner.pk))
    tokens = blind_index.memory_tokens(keys.blind_secret(key), "green tea with friends")
    _others(scripted_instance, 10_000, E1, tokens)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")
    assert vectors.vector_index_exists(scripted_instance.pk, 4)
    llm_script.reply(embedding=[E1])
    llm_script.reply(embedding=[E1])

    hits = _search(scripted_instance, owner, "green tea", limit=50)
    by_vector_only = _search(scripted_instance, owner, "zebra", limit=50)

    assert sorted(h.memory_id for h in hits) == sorted(mine)
    assert sorted(h.memory_id for h in by_vector_only) == sorted(mine)
    assert selectors.memory_categories_for_user(
        instance_id=scripted_instance.pk, user_id=owner.pk
    ) == {"fact": 3}
    listed = selectors.memories_for_user(instance_id=scripted_instance.pk, user_id=owner.pk)
    assert listed.count() == 3


def test_the_vector_query_uses_the_instances_hnsw_index(
    scripted_instance: Any, llm_script: Any
) -> None:
    owner = member(scripted_instance)
    llm_script.reply(embedding=[E1])
    remember(scripted_instance, owner, "anything")
    _others(scripted_instance, 5_000, E1, [])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")
        dims = 4
        cursor.execute(
            f"EXPLAIN SELECT id FROM memories_memory WHERE "  # noqa: S608
            f"{vectors.index_predicate(scripted_instance.pk, dims)} AND user_id = %s "
            f"ORDER BY {vectors.column_expression(dims)} <=> {vectors.query_expression(dims)} "
            "LIMIT 40",
            [owner.pk + 1, vectors.vector_literal(E1)],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert vectors.index_name(scripted_instance.pk, dims) in plan


def test_the_hnsw_scan_goes_on_past_other_users_nearer_rows(
    scripted_instance: Any, llm_script: Any
) -> None:
    owner = member(scripted_instance)
    mine = []
    for other in (E2, E3, unit(0, 0, 0, 1)):
        llm_script.reply(embedding=[at_similarity(E1, other, 0.6)])
        mine.append(str(remember(scripted_instance, owner, "further from the query").pk))
    _others(scripted_instance, 10_000, None, [])
    with transaction.atomic():
        with connection.cursor() as cursor:
            # Only the HNSW index is left to the planner: about 1,800 rows of others lie
            # nearer the query than the owner's three, far beyond hnsw.ef_search.
            cursor.execute("DROP INDEX memory_owner_created")
            cursor.execute("DROP INDEX memory_owner_category")
            cursor.execute("SET LOCAL enable_seqscan = off")
        hits = search.hybrid_search(
            instance=scripted_instance, user_id=owner.pk, query="zebra", vector=E1, limit=50
        )
        transaction.set_rollback(True)

    assert sorted(h.memory_id for h in hits) == sorted(mine)


def test_only_the_final_results_are_decrypted(
    local_instance: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(12):
        remember(local_instance, alice, f"Alice drinks tea at {n} o'clock")
    opened: list[str] = []
    content_open = keys.content_open

    def counting(**kwargs: Any) -> str:
        opened.append(kwargs["memory_id"])
        return content_open(**kwargs)

    monkeypatch.setattr(keys, "content_open", counting)

    hits = _search(local_instance, alice, "tea", limit=3)

    assert len(hits) == 3
    assert sorted(opened) == sorted(h.memory_id for h in hits)


def test_keyword_candidates_are_capped_before_ranking(
    local_instance: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = {str(remember(local_instance, alice, f"tea note {n}").pk) for n in range(5)}
    key = selectors.current_key(instance_id=local_instance.pk, user_id=alice.pk)
    monkeypatch.setattr(search, "KEYWORD_CANDIDATES", 2)

    uncapped = _keyword(local_instance, alice, "tea")
    capped = search.keyword_ranked(
        instance_id=local_instance.pk,
        user_id=alice.pk,
        query=blind_index.parse_query("tea"),
        secret=keys.blind_secret(str(key)),
        candidates=3,
    )
    # The hybrid search takes the module's cap (no vector: the keyword list alone).
    hybrid = search.hybrid_search(
        instance=local_instance, user_id=alice.pk, query="tea", vector=None, limit=50
    )

    assert sorted(uncapped) == sorted(made)
    assert len(capped) == 3
    assert set(capped) <= made
    assert len(hybrid) == 2
    assert {h.memory_id for h in hybrid} <= made
