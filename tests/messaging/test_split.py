"""Answers split to the platforms' limits: boundaries, graphemes, code fences, formats."""

from __future__ import annotations

import html
import re

import pytest
import regex

from messaging.markup import (
    SLACK_SECTION_LIMIT,
    SLACK_STYLE,
    TELEGRAM_LIMIT,
    TELEGRAM_STYLE,
    render,
    slack_cost,
    slack_sections,
    telegram_messages,
)
from messaging.split import split_message, utf16_units

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # one grapheme, 7 code points
FLAG = "\U0001f1eb\U0001f1f7"


def _long_answer() -> str:
    sentence = f"Ceci est une phrase avec un emoji {FAMILY} et un drapeau {FLAG}. "
    prose = "".join(sentence for _ in range(60))
    code = "".join(f"    value_{i} = compute({i})  # é ü\n" for i in range(120))
    text = f"# Rapport\n\n{prose}\n\n```python\n{code}```\n\n{prose}\n\nFin. 🎉"
    assert 9_500 <= len(text) <= 12_000
    return text


def _graphemes(text: str) -> list[str]:
    return regex.findall(r"\X", text)


def _fences_balanced(text: str) -> bool:
    return len(re.findall(r"^```", text, flags=re.MULTILINE)) % 2 == 0


def test_a_long_answer_with_emoji_and_code_splits_into_valid_parts() -> None:
    answer = _long_answer()
    parts = split_message(answer, limit=TELEGRAM_LIMIT, cost=utf16_units)

    assert len(parts) >= 3
    assert "".join(p.body for p in parts) == answer
    assert all(sum(utf16_units(c) for c in p.text) <= TELEGRAM_LIMIT for p in parts)
    assert all(_fences_balanced(p.text) for p in parts)
    # No part boundary inside a grapheme: the parts' graphemes are the answer's.
    assert [g for p in parts for g in _graphemes(p.body)] == _graphemes(answer)
    reopened = [p for p in parts if p.opener]
    assert reopened
    assert all(p.opener == "```python\n" for p in reopened)
    assert all(p.closer.endswith("```\n") for p in parts if p.closer)


def test_prose_splits_at_paragraphs_then_sentences_then_words() -> None:
    paragraph = "word " * 30
    by_paragraph = split_message(f"{paragraph}\n\n{paragraph}", limit=200)
    sentences = "This is one sentence. " * 20
    by_sentence = split_message(sentences, limit=100)
    words = split_message("alpha " * 50, limit=64)

    assert [p.body for p in by_paragraph] == [f"{paragraph}\n\n", paragraph]
    assert all(p.body.endswith("sentence. ") for p in by_sentence[:-1])
    assert all(p.body.endswith("alpha ") for p in words)


def test_an_unbroken_twenty_thousand_character_line_splits_and_terminates() -> None:
    line = "x" * 20_000
    parts = split_message(line, limit=TELEGRAM_LIMIT, cost=utf16_units)
    emoji_line = FAMILY * 3_000  # graphemes of 11 UTF-16 units, no space
    emoji_parts = split_message(emoji_line, limit=TELEGRAM_LIMIT, cost=utf16_units)

    assert [len(p.body) for p in parts] == [4096] * 4 + [20_000 - 4 * 4096]
    assert "".join(p.body for p in emoji_parts) == emoji_line
    assert all(p.body == FAMILY * (len(p.body) // len(FAMILY)) for p in emoji_parts)
    assert all(sum(utf16_units(c) for c in p.text) <= TELEGRAM_LIMIT for p in emoji_parts)


def test_too_small_a_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 64"):
        split_message("text", limit=10)
    assert split_message("", limit=100) == []


def test_markdown_becomes_telegram_html_and_slack_mrkdwn() -> None:
    markdown = (
        "# Title & more\n\n**bold** *it* ~~gone~~ `a<b` [site](https://example.org)\n\n"
        "- one\n- two\n\n```py\nif a < b:\n    pass\n```"
    )

    assert render(markdown, TELEGRAM_STYLE) == (
        "<b>Title &amp; more</b>\n\n<b>bold</b> <i>it</i> <s>gone</s> <code>a&lt;b</code> "
        '<a href="https://example.org">site</a>\n\n• one\n• two\n\n'
        '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>'
    )
    assert render(markdown, SLACK_STYLE) == (
        "*Title &amp; more*\n\n*bold* _it_ ~gone~ `a&lt;b` <https://example.org|site>\n\n"
        "• one\n• two\n\n```\nif a &lt; b:\n    pass\n```"
    )


def test_rendered_parts_stay_within_each_platform_limit() -> None:
    answer = _long_answer() + "\n\n" + "a < b & c > d. " * 400
    telegram = telegram_messages(answer)
    slack = slack_sections(answer)

    visible = [html.unescape(re.sub(r"<[^>]+>", "", m)) for m in telegram]
    assert all(sum(utf16_units(c) for c in v) <= TELEGRAM_LIMIT for v in visible)
    assert all(len(s) <= SLACK_SECTION_LIMIT for s in slack)
    assert all(m.count("<pre") == m.count("</pre>") for m in telegram)
    assert all(m.count("```") % 2 == 0 for m in slack)
    # The words survive the conversion, in order.
    assert "".join(visible).count("Ceci est une phrase") == 120
    assert slack_cost("&") == 5
    assert slack_cost("x") == 1
