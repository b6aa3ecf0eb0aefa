"""The blind index's terms and tokens, and the keyword query language (memories.blind_index)."""

from __future__ import annotations

import pytest
from django.db import connection

from memories import blind_index
from memories.blind_index import parse_query

SECRET = b"k" * 32


def test_a_text_is_indexed_by_its_words_and_adjacent_pairs() -> None:
    assert blind_index.index_terms("I love Green-Tea!") == [
        "p|green tea",
        "p|i love",
        "p|love green",
        "w|green",
        "w|i",
        "w|love",
        "w|tea",
    ]


def test_unspaced_scripts_are_indexed_as_bigrams_and_characters() -> None:
    terms = blind_index.index_terms("東京タワー")

    assert terms == sorted(
        {"w|東京", "w|京タ", "w|タワ", "w|ワー", "w|東", "w|京", "w|タ", "w|ワ", "w|ー"}
    )


def test_case_width_and_accents_are_normalised_alike() -> None:
    assert blind_index.index_terms("CAFÉ") == blind_index.index_terms("café")
    fullwidth = "\uff43\uff41\uff46\uff45"  # "cafe" in full-width letters
    assert blind_index.index_terms(fullwidth) == ["w|cafe"]
    # A decomposed accent (e + U+0301) is the same word as the composed one.
    assert blind_index.index_terms("cafe\u0301") == ["w|café"]


def test_tokens_are_keyed_sorted_and_distinct() -> None:
    mine = blind_index.memory_tokens(SECRET, "tea tea TEA")
    theirs = blind_index.memory_tokens(b"o" * 32, "tea")

    assert mine == sorted(
        {blind_index.token(SECRET, "w|tea"), blind_index.token(SECRET, "p|tea tea")}
    )
    assert theirs == [blind_index.token(b"o" * 32, "w|tea")]
    assert blind_index.token(SECRET, "w|tea") != theirs[0]
    assert all(-(2**63) <= t < 2**63 for t in mine)


@pytest.mark.parametrize(
    "query",
    ["", "   ", "!!! ...", "?", "😀 🎉", "-coffee", "-coffee -tea", '-"green tea"', "- -"],
)
def test_queries_with_nothing_to_look_for_are_empty(query: str) -> None:
    parsed = parse_query(query)

    assert parsed.empty
    assert parsed.positive_text == ""


def _shape(query: str) -> list[list[tuple[bool, str]]]:
    return [
        [(False, op.text) for op in group.required] + [(True, op.text) for op in group.excluded]
        for group in parse_query(query).groups
    ]


@pytest.mark.parametrize(
    ("query", "shape"),
    [
        ("coffee -decaf", [[(False, "coffee"), (True, "decaf")]]),
        ("coffee or tea", [[(False, "coffee")], [(False, "tea")]]),
        ("dark roast or tea", [[(False, "dark"), (False, "roast")], [(False, "tea")]]),
        ('"green tea" cake', [[(False, "green tea"), (False, "cake")]]),
        ('"unterminated phrase', [[(False, "unterminated phrase")]]),
        ("coffee or -tea", [[(False, "coffee")]]),
        ("or", [[(False, "or")]]),
        ("tea or", [[(False, "tea"), (False, "or")]]),
        ("or tea", [[(False, "or"), (False, "tea")]]),
        ("a or or b", [[(False, "a")], [(False, "or"), (False, "b")]]),
        ("tea OR coffee", [[(False, "tea")], [(False, "coffee")]]),
        ("tea - milk", [[(False, "tea"), (True, "milk")]]),
        ("tea or 😀", [[(False, "tea")]]),
    ],
)
def test_queries_group_like_websearch_to_tsquery(
    query: str, shape: list[list[tuple[bool, str]]]
) -> None:
    assert _shape(query) == shape


def test_a_phrase_needs_its_words_and_their_pairs() -> None:
    (group,) = parse_query('"green tea" -"black tea"').groups

    assert group.required[0].terms == ("w|green", "w|tea", "p|green tea")
    assert group.excluded[0].terms == ("w|black", "w|tea", "p|black tea")
    assert parse_query("e-mail").groups[0].required[0].terms == ("w|e", "w|mail", "p|e mail")
    assert parse_query("東京タワー").groups[0].required[0].terms == (
        "w|東京",
        "w|京タ",
        "w|タワ",
        "w|ワー",
    )


def test_the_vector_side_gets_the_positive_text_and_shared_exclusions() -> None:
    parsed = parse_query('"green tea" -decaf or coffee -decaf')

    assert parsed.positive_text == "green tea coffee"
    assert [op.text for op in parsed.excluded_everywhere] == ["decaf"]
    assert parse_query("tea -milk or coffee").excluded_everywhere == ()


def test_long_queries_are_cut() -> None:
    parsed = parse_query(" ".join(f"w{n}" for n in range(100)))

    assert len(parsed.groups[0].required) == blind_index.MAX_QUERY_TERMS
    assert len(parse_query("x" * 10_000).groups[0].required[0].text) == blind_index.MAX_QUERY_CHARS


def _as_tsquery(query: str) -> str:
    """Our parse written as PostgreSQL prints a tsquery."""

    def operand(text: str, negated: bool) -> str:
        words = [f"'{s.text}'" for s in blind_index.segments(text)]
        body = " <-> ".join(words)
        if not negated:
            return body
        return f"!( {body} )" if len(words) > 1 else f"!{body}"

    return " | ".join(
        " & ".join(
            [operand(op.text, False) for op in group.required]
            + [operand(op.text, True) for op in group.excluded]
        )
        for group in parse_query(query).groups
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "fat rats or cats",
        "a or b c",
        "foo -bar",
        '"big red" dog',
        'dog -"big red"',
        "a -b or c",
        "a or or b",
        "or a",
        "a or",
        '"unterminated phrase',
        "a - b",
        "a OR b",
    ],
)
def test_the_parse_matches_postgresqls_websearch_to_tsquery(query: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT websearch_to_tsquery('simple', %s)::text", [query])
        (expected,) = cursor.fetchone()

    assert _as_tsquery(query) == expected
