"""``manage.py reembed_memories``: a model change re-embeds the instance's memories,
resumably, and moves the HNSW index to the new dimension."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from memories import vectors
from memories.models import Memory
from tests.memories.conftest import member, remember, unit


def _dims() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, vector_dims(embedding) FROM memories_memory")
        return dict(cursor.fetchall())


def test_a_dimension_change_re_embeds_resumably_and_moves_the_index(
    scripted_instance: Any, llm_script: Any
) -> None:
    user = member(scripted_instance)
    for n in range(3):
        llm_script.reply(embedding=[unit(1, n, 0, 0)])
    texts = {str(remember(scripted_instance, user, f"fact {n}").pk): f"fact {n}" for n in range(3)}
    ids = sorted(texts)
    scripted_instance.embedding_model = "scripted/embed-large"
    scripted_instance.embedding_dimensions = 6
    scripted_instance.save()
    llm_script.reply(embedding=[unit(1, 0, 0, 0, 0, 1), unit(0, 1, 0, 0, 0, 1)])
    llm_script.reply(error=503)
    out = io.StringIO()

    with pytest.raises(CommandError, match="run it again"):
        call_command("reembed_memories", instance=scripted_instance.slug, batch_size=2, stdout=out)
    halfway = _dims()
    llm_script.reply(embedding=[unit(0, 0, 1, 0, 0, 1)])
    call_command("reembed_memories", instance=scripted_instance.slug, batch_size=2, stdout=out)

    assert sorted(d for d in halfway.values()) == [4, 6, 6]
    assert [halfway[i] for i in ids[:2]] == [6, 6]
    assert _dims() == dict.fromkeys(ids, 6)
    assert set(Memory.objects.values_list("embedding_model", flat=True)) == {"scripted/embed-large"}
    assert [r.input for r in llm_script.requests[-3:]] == [
        [texts[ids[0]], texts[ids[1]]],
        [texts[ids[2]]],
        [texts[ids[2]]],
    ]
    assert vectors.vector_index_dims(scripted_instance.pk) == [6]
    lines = out.getvalue().splitlines()
    assert lines[0] == "3 memories to re-embed with scripted/embed-large (6 dimensions)"
    assert "re-embedded 2 of 3 (0 would not open)" in lines
    assert lines[-1] == (
        "done: 1 re-embedded, 0 would not open; index for 6 dimensions; old indexes dropped: 4"
    )


def test_re_embedding_with_the_same_model_has_nothing_to_do(
    local_instance: Any, alice: Any
) -> None:
    remember(local_instance, alice, "Alice likes sailing")
    out = io.StringIO()

    call_command("reembed_memories", instance=local_instance.slug, stdout=out)

    assert out.getvalue().splitlines()[0].startswith("0 memories to re-embed")
    assert vectors.vector_index_dims(local_instance.pk) == [384]


def test_an_unknown_instance_is_a_clear_error(transactional_db: Any) -> None:
    with pytest.raises(CommandError, match="no instance 'nope'"):
        call_command("reembed_memories", instance="nope")
