"""Splitting a Markdown answer into parts that fit a platform's message limit.

docs/channels.md §4. A part ends at the last paragraph break that fits, else the last
line break, else the last sentence end, else the last space, else the last grapheme
boundary (Unicode extended grapheme clusters, UAX #29, through ``regex``'s ``\\X``), so
no part ends inside a multi-byte character, an emoji sequence or a combining sequence.
A fenced code block cut in two is closed at the end of the first part and reopened (with
its info string) at the start of the next. Each part's ``body`` is a slice of the answer:
the bodies joined are the answer, character for character.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

import regex

# A fence opener or closer line (CommonMark: up to 3 spaces, 3+ backticks or tildes).
_FENCE_RE = re.compile(r"^ {0,3}(?P<marker>`{3,}|~{3,})(?P<info>[^\n]*)$")
_SENTENCE_END_RE = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"')\]\u201d\u2019]*\s+")
_GRAPHEME_RE = regex.compile(r"\X", regex.DOTALL)
# The smallest limit a part can be cut to: room for a fence reopened and closed.
MIN_LIMIT = 64


@dataclass(frozen=True)
class Part:
    """One message: ``text`` (what is sent) = ``opener`` + ``body`` + ``closer``.

    ``body`` is the slice of the answer; ``opener`` / ``closer`` are the fence lines added
    so a code block cut across parts stays a code block in each.
    """

    body: str
    opener: str = ""
    closer: str = ""

    @property
    def text(self) -> str:
        """What is sent: the body with the fence lines added around it."""
        return self.opener + self.body + self.closer


def utf16_units(char: str) -> int:
    """Telegram counts message length in UTF-16 code units: 2 for a character beyond the
    Basic Multilingual Plane, else 1."""
    return 2 if ord(char) > 0xFFFF else 1


@dataclass(frozen=True)
class _Fence:
    marker: str
    info: str


def _fence_states(text: str) -> list[tuple[int, int, _Fence | None]]:
    """``(line start, line end, fence open after this line)`` for each line of ``text``."""
    states: list[tuple[int, int, _Fence | None]] = []
    open_fence: _Fence | None = None
    start = 0
    for line in text.splitlines(keepends=True):
        end = start + len(line)
        match = _FENCE_RE.match(line.rstrip("\r\n"))
        if match is not None:
            marker = match["marker"]
            if open_fence is None:
                open_fence = _Fence(marker=marker, info=match["info"].strip())
            elif (
                marker[0] == open_fence.marker[0]
                and len(marker) >= len(open_fence.marker)
                and not match["info"].strip()
            ):
                open_fence = None
        states.append((start, end, open_fence))
        start = end
    return states


class _Answer:
    """The answer with what cutting needs precomputed: per-character costs, grapheme
    boundaries, boundaries of each level, the fence open at each line."""

    def __init__(self, text: str, cost: Callable[[str], int]) -> None:
        self.text = text
        self.cumulative = [0, *accumulate(cost(c) for c in text)]
        self.graphemes = [0, *(m.end() for m in _GRAPHEME_RE.finditer(text))]
        self.paragraphs = [m.end() for m in re.finditer(r"\n[ \t]*\n+", text)]
        self.lines = [m.end() for m in re.finditer(r"\n", text)]
        self.sentences = [m.end() for m in _SENTENCE_END_RE.finditer(text)]
        self.words = [m.end() for m in re.finditer(r"\s+", text)]
        self.fences = _fence_states(text)
        self.line_starts = [start for start, _, _ in self.fences]
        self.fence_lines = [
            (start, end)
            for start, end, _ in self.fences
            if _FENCE_RE.match(text[start:end].rstrip())
        ]
        longest = max((len(f.marker) for _, _, f in self.fences if f), default=0)
        # Room kept for a closer ("\n" + the longest marker + "\n").
        self.closer_room = longest + 2 if longest else 0

    def cost(self, start: int, end: int) -> int:
        return self.cumulative[end] - self.cumulative[start]

    def fence_before(self, position: int) -> _Fence | None:
        """The fence open at ``position`` (a cut there leaves this block open)."""
        line = bisect.bisect_right(self.line_starts, position) - 1
        if line < 0:
            return None
        start, _, after = self.fences[line]
        if position == start:
            return self.fences[line - 1][2] if line > 0 else None
        return after if position >= self.fences[line][1] else self._inside(line)

    def _inside(self, line: int) -> _Fence | None:
        # A cut inside a line is inside whatever was open when the line began.
        return self.fences[line - 1][2] if line > 0 else None

    def inside_fence_line(self, position: int) -> bool:
        index = bisect.bisect_right(self.fence_lines, (position, len(self.text) + 1)) - 1
        if index < 0:
            return False
        start, end = self.fence_lines[index]
        return start < position < end


def _last_at_most(boundaries: Sequence[int], low: int, high: int) -> int | None:
    index = bisect.bisect_right(boundaries, high) - 1
    if index >= 0 and boundaries[index] > low:
        return boundaries[index]
    return None


def _cut(answer: _Answer, start: int, budget: int) -> int:
    """Where the part beginning at ``start`` ends, with at most ``budget`` cost."""
    limit_end = bisect.bisect_right(answer.cumulative, answer.cumulative[start] + budget) - 1
    if limit_end >= len(answer.text):
        return len(answer.text)
    levels = (answer.paragraphs, answer.lines, answer.sentences, answer.words, answer.graphemes)
    # First only boundaries in the window's second half (a paragraph break near the start
    # would leave a tiny part while a line break near the end fits), then any.
    for low in (start + (limit_end - start) // 2, start):
        for boundaries in levels:
            end = _last_at_most(boundaries, low, limit_end)
            while end is not None and answer.inside_fence_line(end):
                end = _last_at_most(boundaries, low, end - 1)
            if end is not None:
                return end
    # One grapheme costs more than the whole budget: cut between its code points.
    return max(limit_end, start + 1)


def split_message(text: str, *, limit: int, cost: Callable[[str], int] = lambda c: 1) -> list[Part]:
    """Split ``text`` (Markdown) into parts whose ``text`` costs at most ``limit``.

    ``cost`` is what one character counts towards the limit (``utf16_units`` for
    Telegram). Returns ``[]`` for an empty text; the parts' bodies joined equal ``text``.
    Runs in time linear in the text's length times the number of parts' boundary look-ups
    (a 20,000-character line without a space is 5 parts at 4,096).

    Raises:
        ValueError: ``limit`` below ``MIN_LIMIT``.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}")
    answer = _Answer(text, cost)
    parts: list[Part] = []
    start = 0
    while start < len(text):
        reopened = answer.fence_before(start)
        opener = f"{reopened.marker}{reopened.info}\n" if reopened else ""
        budget = limit - sum(cost(c) for c in opener) - answer.closer_room
        end = _cut(answer, start, max(budget, 1))
        body = text[start:end]
        still_open = answer.fence_before(end) if end < len(text) else None
        closer = ""
        if still_open is not None:
            closer = ("" if body.endswith("\n") else "\n") + still_open.marker + "\n"
        parts.append(Part(body=body, opener=opener, closer=closer))
        start = end
    return parts
