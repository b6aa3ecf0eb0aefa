# ruff: noqa: RUF001 (requests in many scripts)
"""Tool preselection by meaning (pipeline/tool_match.py) with the packaged multilingual
model: requests no rule knows, near misses, the tools an instance does not have, two
requests in one message, quoted material, and the turn's vector prefetch."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline import preprocess as pre
from pipeline import tool_match
from skills.registry import all_tools, get_tool

DEMO = ("calculator", "datetime_now", "unit_convert")


@pytest.fixture(scope="module", autouse=True)
def _model_loaded() -> None:
    pre.warm_up()


def _candidates(names: tuple[str, ...] = ()) -> list[pre.ToolCandidate]:
    specs = [get_tool(n) for n in names] if names else list(all_tools())
    return [pre.ToolCandidate(name=s.name, description=s.description) for s in specs if s]


def _chosen(text: str, names: tuple[str, ...] = ()) -> dict[str, str]:
    return {c.name: c.reason for c in pre.tool_choices(text, _candidates(names))}


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        ("Necesito saber la suma de 340 y 1299", "calculator"),
        ("Mi serve sapere il prodotto di 48 e 12", "calculator"),
        ("Quanto fa trecentoquaranta più milleduecento?", "calculator"),
    ],
)
def test_a_request_no_rule_knows_is_matched_by_meaning(text: str, tool: str) -> None:
    chosen = _chosen(text)
    assert list(chosen) == [tool]
    assert chosen[tool].startswith("similar to an example (0.")
    assert "no tool 0." in chosen[tool]


@pytest.mark.parametrize(
    "text",
    [
        "Tips for three days in Porto",
        "Write a function that formats dates in Go",
        "¿Te acuerdas de los veranos de niños? Qué tiempos",
        "how do you say 'what time is it' in italian?",
        "переведи на английский: «сколько времени?»",
        "Hallo, wie geht's?",
    ],
)
def test_near_misses_and_quoted_requests_get_no_tool(text: str) -> None:
    assert _chosen(text) == {}


def test_a_request_for_a_tool_the_instance_lacks_falls_to_no_other() -> None:
    # The weather tool is not enabled: the clock, its nearest enabled neighbour, is not
    # offered in its place.
    assert _chosen("Va a llover mañana en Bilbao?", DEMO) == {}
    assert "weather" in _chosen("Va a llover mañana en Bilbao?")


def test_two_requests_in_one_message_get_both_tools() -> None:
    chosen = _chosen("Il est quelle heure à Dakar et il fait chaud là-bas ?")
    assert set(chosen) == {"datetime_now", "weather"}
    assert chosen["weather"].endswith("in 'il fait chaud là-bas'")


def test_a_question_about_what_was_saved_gets_the_lookup_not_a_save() -> None:
    chosen = _chosen("lembra que eu te falei o número do meu armário?")
    # Found by meaning beside the save's rule (its regression is sure of it), or read
    # from the question.
    assert chosen["memory_search"].startswith(("similar to an example", "a question about"))
    assert "memory_save" not in chosen
    # A save with a question about its figure stays a save.
    chosen = _chosen("Remember that my rent is 1,200 a month. What is that in a year?")
    assert "memory_save" in chosen
    assert "memory_search" not in chosen


def test_a_tool_beside_a_rules_tool_needs_a_sure_regression() -> None:
    # The clock's words ("what time") and a search's need: both tools.
    chosen = _chosen("What time does the Champions League final kick off tonight?")
    assert "web_search" in chosen
    # A plain time question gets the clock alone.
    assert list(_chosen("What time is it in Lima?")) == ["datetime_now"]


def test_a_clause_stating_a_fact_is_no_save() -> None:
    # "my daughter is 7" is context for the request beside it, not a save.
    chosen = _chosen("My daughter is 7 and she loves horses, which book would suit her?")
    assert "memory_save" not in chosen
    # Asked for in words, a save in a clause is still found by its rule.
    assert "memory_save" in _chosen("What is 12 times 7? And remember that I'm vegetarian.")


def test_the_regressions_veto_a_neighbour_that_only_shares_a_name() -> None:
    # "Krakow" is in a weather example; sightseeing there needs no forecast.
    likely = tool_match.tool_probabilities("Was sollte man in Krakau gesehen haben?")
    assert likely is not None
    assert likely["weather"] < tool_match.CLASSIFIER_MIN_PROBABILITY
    assert _chosen("Was sollte man in Krakau gesehen haben?") == {}


def test_clauses_split_on_sentence_ends_and_the_words_for_and() -> None:
    assert tool_match.clauses("What is 5 plus 7?") == ["What is 5 plus 7?"]
    assert tool_match.clauses("calcule 18 % de 240 et dis-moi l'heure à Lima") == [
        "calcule 18 % de 240",
        "dis-moi l'heure à Lima",
    ]
    assert tool_match.clauses("東京は何時？そして天気は？") == ["東京は何時", "天気は"]
    assert tool_match.clauses("ok. thanks") == ["ok. thanks"]


def test_the_prefetch_leaves_nothing_to_embed_inside_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "Wie viel wiegen 3 Pfund in Kilo, und regnet es in Graz?"
    pre.tool_vectors_prefetch(text)
    calls: list[Any] = []

    def counted(model: str, texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        raise AssertionError("embedded inside the turn")

    monkeypatch.setattr(tool_match, "local_embed", counted)
    chosen = _chosen(text)
    assert calls == []
    assert {"unit_convert", "weather"} <= set(chosen)


def test_without_the_model_the_rules_and_trigrams_still_choose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tool_match, "_vectors", tool_match._Vectors())
    monkeypatch.setattr(tool_match._vectors, "available", False)
    assert list(_chosen("What is 48 divided by 6?")) == ["calculator"]
    assert _chosen("Necesito saber la suma de 340 y 1299") == {}


def test_a_model_failure_on_one_text_keeps_the_other_evidence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(model: str, texts: list[str]) -> list[list[float]]:
        raise ValueError("the model choked")

    monkeypatch.setattr(tool_match, "_vectors", tool_match._Vectors())
    monkeypatch.setattr(tool_match, "local_embed", broken)
    assert list(_chosen("What is 48 divided by 6?")) == ["calculator"]
    assert _chosen("Ein Satz ohne Regel und ohne Modell") == {}
    # A failure is not the model missing: the next text is tried again.
    assert tool_match._vectors.available


def test_a_lone_surrogate_is_embedded() -> None:
    from openmates.embeddings import local_embed

    (vector,) = local_embed("local/use-multilingual-v3", ["ab\ud800cd"])
    assert len(vector) == 512


@pytest.mark.parametrize(
    "text",
    [
        "Write a function that converts miles to kilometres in Rust",
        "Schreib eine Funktion, die Celsius in Fahrenheit umrechnet",
        "Escribe un script en Bash que añada la fecha de hoy al nombre del archivo",
        "用Python写一个计算两个日期相差几天的函数",
    ],
)
def test_a_request_for_code_gets_no_tool(text: str) -> None:
    assert pre.is_code_request(pre.instruction_text(text))
    assert _chosen(text) == {}


def test_the_likelier_tool_by_its_regression_takes_the_neighbours_place() -> None:
    chosen = _chosen("heads up, my new address is 14 Elm Road, remember that")
    assert list(chosen) == ["memory_save"]


def test_the_trigram_index_gives_the_best_cosine_of_every_example() -> None:
    messages = (
        "Wie viel ist 17 mal 23?",
        "what's the weather like in Lyon tomorrow",
        "remind me what I told you about my sister",
        "Combien font 12 % de 250 ?",
        "東京は今何時ですか",
        "",
        "!!! 42 ???",
    )
    for spec in all_tools():
        profile = tool_match.tool_profile(spec.name, spec.description)
        for message in messages:
            grams = tool_match.trigrams(message)
            expected = max(
                (
                    tool_match.trigram_cosine(grams, example, None, norm)
                    for example, norm in zip(profile.trigrams, profile.trigram_norms, strict=True)
                ),
                default=0.0,
            )
            found = tool_match.best_trigram_cosine(
                grams, profile.trigram_index, profile.trigram_norms
            )
            assert found == pytest.approx(expected, abs=1e-12), (spec.name, message)
    assert tool_match.best_trigram_cosine(tool_match.trigrams("abc"), {}, ()) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "Πόσο έχει η βενζίνη σήμερα;",
        "Jaký je dnes kurz eura?",
        "आज सोने का भाव कितना है?",
        "Czy Biedronka jest otwarta w tę niedzielę?",
    ],
)
def test_a_changing_thing_asked_about_now_gets_the_search(text: str) -> None:
    assert _chosen(text)["web_search"].startswith("rule:")


def test_a_sum_with_a_price_and_now_is_no_search() -> None:
    assert "web_search" not in _chosen("the price was 80 and now it's 20% off, what do I pay?")


def test_a_rule_of_a_tool_the_instance_lacks_keeps_the_clock_out() -> None:
    # On the demo instance the search's question must not fall to the clock's examples.
    assert _chosen("Είναι ανοιχτή η Ακρόπολη αυτή τη στιγμή;", DEMO) == {}


def test_similarity_in_a_language_the_model_was_not_trained_on_needs_a_margin() -> None:
    # Sights of a city in Greek: the clock's Greek examples are nearest by a hair.
    assert "el" not in tool_match.EMBEDDING_LANGUAGES
    profiles = [tool_match.tool_profile(t.name, t.description) for t in all_tools()]
    text = "Τι να δω στη Θεσσαλονίκη σε δύο μέρες;"
    assert tool_match.tools_by_meaning(text, profiles, language="el") == []
    assert tool_match.tools_by_meaning(text, profiles, language="") != []
