"""The short system text a base model gets (``pipeline.prompts.base_model_header``)."""

from __future__ import annotations

from datetime import UTC, datetime

from instances.languages import SUPPORTED_LANGUAGES
from pipeline import prompts

NOW = datetime(2026, 12, 6, 22, 0, tzinfo=UTC)


def test_the_header_names_the_assistant_the_date_and_shows_pairs_in_the_language() -> None:
    header = prompts.base_model_header(name="Demo", now=NOW, language="fr", memories=[])

    assert header.splitlines()[0] == (
        "Demo is a friendly, helpful AI assistant. It answers each question correctly and "
        "briefly, in the language of the question. Today is Sunday, 2026-12-06."
    )
    assert header.endswith(
        "Q: Quelle est la capitale de l'Allemagne ?\nA: La capitale de l'Allemagne est Berlin.\n"
        "Q: Combien de jours compte une semaine ?\nA: Une semaine compte sept jours."
    )
    assert "Facts about" not in header


def test_memories_become_facts_and_an_unlisted_language_gets_english_pairs() -> None:
    header = prompts.base_model_header(
        name="Ada", now=NOW, language="sw", memories=["Lives in Lyon.", "Has a cat"]
    )

    assert "\n\nFacts about the person asking: Lives in Lyon. Has a cat.\n\n" in header
    assert header.endswith("Q: How many days does a week have?\nA: A week has seven days.")


def test_every_example_language_is_supported_and_has_two_pairs() -> None:
    examples = prompts._base_model_examples()

    assert set(examples) <= set(SUPPORTED_LANGUAGES)
    assert {"en", "de", "fr", "es", "ja", "zh"} <= set(examples)
    assert {len(pairs) for pairs in examples.values()} == {2}
    assert all(q.strip() and a.strip() for pairs in examples.values() for q, a in pairs)
