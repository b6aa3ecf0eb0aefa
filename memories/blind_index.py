"""The keyed blind index of memories and the keyword query language (docs/crypto.md §4).

**Terms.** Text is NFKC-normalised and case-folded, then cut into words: maximal runs
of letters, digits and combining marks (anything else separates words, so ``e-mail``
is ``e`` ``mail`` and emoji and punctuation vanish). Scripts written without spaces
(Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) are cut out of those runs and
indexed as character bigrams plus single characters, so ``東京タワーに行った`` is found
by ``東京`` or ``タワー`` and a one-character query still matches.

**Tokens.** A memory stores the 64-bit keyed HMAC (first 8 bytes of HMAC-SHA-256 with
the user's ``blind-index`` secret, as a signed integer) of each distinct term: every
word (``w|<word>``), every pair of adjacent words (``p|<word> <word>``, for phrases) and
every CJK bigram and character (``w|<chars>``). The server never stores or logs the
words; what the tokens reveal is which memories of one user share a term and how often.

**Queries** are read like PostgreSQL's ``websearch_to_tsquery('simple', …)``: words
are ANDed; ``"quoted text"`` (and a hyphenated word) is a phrase, matched as all its
words and adjacent pairs; ``or`` between two operands is OR (binding looser than AND);
``-term`` excludes. Groups without a positive term (``-coffee``, the ``-tea`` in
``coffee or -tea``) are dropped: a query of only exclusions, only punctuation, only
emoji or nothing at all gives no keyword condition (:attr:`KeywordQuery.empty`).
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

MAX_QUERY_CHARS = 500
MAX_QUERY_TERMS = 32

# Scripts written without spaces between words (code point ranges, inclusive).
_UNSPACED_RANGES = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def _unspaced(char: str) -> bool:
    point = ord(char)
    if point < 0x0E00:  # most text: Latin, Greek, Cyrillic, Arabic, Devanagari, ...
        return False
    return any(low <= point <= high for low, high in _UNSPACED_RANGES)


def _word_char(char: str) -> bool:
    if char < "\x80":
        return char.isalnum()
    return unicodedata.category(char)[0] in "LNM"


@dataclass(frozen=True)
class Segment:
    """A run of text: a spaced word, or a run of an unspaced script (``unspaced``)."""

    text: str
    unspaced: bool


def normalise(text: str) -> str:
    """NFKC and case folding: what is indexed and matched."""
    return unicodedata.normalize("NFKC", text).casefold()


def segments(text: str) -> list[Segment]:
    """The words and unspaced runs of ``text`` (normalised), in order."""
    found: list[Segment] = []
    current: list[str] = []
    kind = False
    for char in normalise(text):
        if not _word_char(char):
            if current:
                found.append(Segment("".join(current), kind))
                current = []
            continue
        unspaced = _unspaced(char) or (
            # A combining mark stays with the run it follows (Thai vowel signs, accents).
            bool(current) and kind and unicodedata.category(char)[0] == "M"
        )
        if current and unspaced != kind:
            found.append(Segment("".join(current), kind))
            current = []
        kind = unspaced
        current.append(char)
    if current:
        found.append(Segment("".join(current), kind))
    return found


def _run_terms(run: str) -> Iterator[str]:
    if len(run) == 1:
        yield f"w|{run}"
        return
    for position in range(len(run) - 1):
        yield f"w|{run[position : position + 2]}"


def segment_terms(found: list[Segment], *, unigrams: bool) -> list[str]:
    """The terms of ``found``: words, adjacent word pairs, unspaced bigrams.

    With ``unigrams`` (indexing) every character of an unspaced run is a term too, so a
    one-character query finds it; a query needs only its own bigrams.
    """
    terms: list[str] = []
    previous: str | None = None
    for segment in found:
        if segment.unspaced:
            terms.extend(_run_terms(segment.text))
            if unigrams and len(segment.text) > 1:
                terms.extend(f"w|{char}" for char in segment.text)
            previous = None
            continue
        terms.append(f"w|{segment.text}")
        if previous is not None:
            terms.append(f"p|{previous} {segment.text}")
        previous = segment.text
    return terms


def index_terms(text: str) -> list[str]:
    """Every distinct term a memory's ``text`` is indexed under, sorted."""
    return sorted(set(segment_terms(segments(text), unigrams=True)))


def token(secret: bytes, term: str) -> int:
    """The keyed blind-index token of ``term``: a signed 64-bit integer."""
    digest = hmac.new(secret, f"om1|bi|{term}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def tokens(secret: bytes, terms: Iterable[str]) -> list[int]:
    """The sorted distinct tokens of ``terms``."""
    return sorted({token(secret, term) for term in terms})


def memory_tokens(secret: bytes, text: str) -> list[int]:
    """What ``Memory.blind_index`` stores for ``text`` (sorted, distinct)."""
    return tokens(secret, index_terms(text))


# --- the query language -----------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """One query term: its terms (all must match), whether it is excluded, its text."""

    terms: tuple[str, ...]
    negated: bool
    text: str


@dataclass(frozen=True)
class Group:
    """Operands ANDed together; a query is an OR of groups."""

    required: tuple[Operand, ...]
    excluded: tuple[Operand, ...]


@dataclass(frozen=True)
class KeywordQuery:
    """A parsed query: OR of :class:`Group` s; ``empty`` when it asks for nothing."""

    groups: tuple[Group, ...] = ()
    positive_text: str = ""
    excluded_everywhere: tuple[Operand, ...] = field(default=())

    @property
    def empty(self) -> bool:
        """True when the keyword side contributes nothing."""
        return not self.groups

    def positive_terms(self) -> list[str]:
        """Every term of every required operand (what keyword ranking counts)."""
        return sorted({t for group in self.groups for op in group.required for t in op.terms})


_OR = object()


def _operand(raw: str, negated: bool) -> Operand:
    return Operand(tuple(dict.fromkeys(segment_terms(segments(raw), unigrams=False))), negated, raw)


def _lex(query: str) -> list[object]:
    """Operands and OR markers, left to right (quotes, ``-`` and ``or`` as PostgreSQL)."""
    items: list[object] = []
    position, end = 0, len(query)
    negated = False
    while position < end:
        char = query[position]
        if char.isspace():
            position += 1
        elif char == "-":
            negated, position = True, position + 1
        elif char == '"':
            close = query.find('"', position + 1)
            close = end if close < 0 else close
            items.append(_operand(query[position + 1 : close], negated))
            negated, position = False, close + 1
        else:
            stop = position
            while stop < end and not query[stop].isspace() and query[stop] != '"':
                stop += 1
            word = query[position:stop]
            items.append(
                _OR if word.casefold() == "or" and not negated else _operand(word, negated)
            )
            negated, position = False, stop
    return items


def _resolved(items: list[object]) -> list[object]:
    """``or`` is an operator only between two operands; elsewhere it is the word."""
    resolved: list[object] = []
    for index, item in enumerate(items):
        operator = (
            item is _OR and bool(resolved) and resolved[-1] is not _OR and index + 1 < len(items)
        )
        resolved.append(_OR if operator else (_operand("or", False) if item is _OR else item))
    return resolved


def parse_query(query: str) -> KeywordQuery:
    """Parse a search query (module docstring); never raises.

    The query is cut to :data:`MAX_QUERY_CHARS` characters and :data:`MAX_QUERY_TERMS`
    operands. ``positive_text`` is the query without its exclusions, quotes and
    operators (what the vector side embeds); ``excluded_everywhere`` lists exclusions
    that hold in every group (the vector side filters those out too).
    """
    items = _resolved(_lex(query[:MAX_QUERY_CHARS]))
    groups: list[Group] = []
    current: list[Operand] = []
    operands = 0
    for item in [*items, _OR]:
        if item is _OR:
            required = tuple(op for op in current if not op.negated and op.terms)
            excluded = tuple(op for op in current if op.negated and op.terms)
            if required:
                groups.append(Group(required, excluded))
            current = []
        elif isinstance(item, Operand) and operands < MAX_QUERY_TERMS:
            current.append(item)
            operands += 1
    positive = " ".join(op.text for group in groups for op in group.required)
    everywhere: tuple[Operand, ...] = ()
    if groups:
        shared = set.intersection(*({op.terms for op in g.excluded} for g in groups))
        everywhere = tuple(op for op in groups[0].excluded if op.terms in shared)
    return KeywordQuery(tuple(groups), positive, everywhere)
