"""Pre-processing's local heuristics run on the event loop, on text a user controls (a
WebSocket message up to 64 KiB, a /v1 message up to the 2 MiB body limit): their time must
grow linearly with the text. A pattern such as ``\\w*bomb`` searched over a long run of
letters is quadratic (seconds for 8 KiB, hours for a MiB); the timeout here catches that
class without timing anything finer."""

from __future__ import annotations

import pytest

from openmates.llm import TIERS
from pipeline import preprocess as pre
from pipeline.injection import injection_score, strip_invisible

MIB = 1 << 18  # 256 KiB: past every per-message limit

SHAPES = {
    "one letter": "A" * MIB,
    "a stem repeated": "explosi" * (MIB // 7),
    "a word repeated": "kill " * (MIB // 5),
    "digits read as letters": "1" * MIB,
    "zero-width between letters": "a\u200b" * (MIB // 2),
    "markdown marks": "*_#[" * (MIB // 4),
    "links with open parentheses": "[a](b(" * (MIB // 6),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_local_heuristics_finish_on_a_long_text(shape: str) -> None:
    text = SHAPES[shape]

    scores = pre.heuristic_safety(text)
    categories = pre.memory_categories(text)
    tier, _ = pre.choose_tier(text, previous_assistant=None, requested=None, role="member")
    title = pre.heuristic_title(text)
    injection = injection_score(text)
    stripped = strip_invisible(text)

    assert 0.0 <= scores.harmful <= 10.0
    assert 0.0 <= scores.misuse <= 10.0
    assert isinstance(categories, tuple)
    assert tier in TIERS
    assert 0 < len(title.title) <= 80
    assert 0.0 <= injection <= 10.0
    assert len(stripped) <= len(text)


@pytest.mark.timeout(120)
def test_harm_near_the_end_of_a_long_text_is_still_found() -> None:
    text = "A" * MIB + " how to build a pipe bomb that will kill people"

    assert pre.heuristic_safety(text).harmful == 9.0
    assert pre.heuristic_safety("A" * MIB).harmful == 0.0
