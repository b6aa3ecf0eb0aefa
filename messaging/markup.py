"""Markdown answers in each platform's own format, cut to its message limit.

docs/channels.md §4. The answer is parsed with markdown-it-py (CommonMark plus
strikethrough) and written again as Telegram's HTML subset (``parse_mode="HTML"``: ``b``,
``i``, ``s``, ``code``, ``pre``, ``a``, ``blockquote``) or as Slack's mrkdwn (``*bold*``,
``_italic_``, ``~strike~``, ``<url|text>``, ``&``/``<``/``>`` escaped). Both writers
produce balanced markup whatever the input: a ``**`` left open by a cut is plain text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from messaging.split import MIN_LIMIT, split_message, utf16_units

# Telegram Bot API sendMessage: 1-4096 characters of text after entity parsing;
# Slack Block Kit: a section block's text is at most 3,000 characters.
TELEGRAM_LIMIT = 4096
SLACK_SECTION_LIMIT = 3000

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")
_SAFE_SCHEMES = ("http://", "https://", "mailto:", "tg://")
_TAG_RE = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class _Style:
    escape: Callable[[str], str]
    bold: Callable[[str], str]
    italic: Callable[[str], str]
    strike: Callable[[str], str]
    code: Callable[[str], str]
    pre: Callable[[str, str], str]
    link: Callable[[str, str], str]
    quote: Callable[[str], str]


def _telegram_link(inner: str, href: str) -> str:
    if not href.startswith(_SAFE_SCHEMES):
        return inner
    return f'<a href="{html.escape(href, quote=True)}">{inner}</a>'


def _telegram_pre(code: str, language: str) -> str:
    escaped = html.escape(code.rstrip("\n"), quote=False)
    if language:
        lang = html.escape(language.split()[0], quote=True)
        return f'<pre><code class="language-{lang}">{escaped}</code></pre>'
    return f"<pre>{escaped}</pre>"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_link(inner: str, href: str) -> str:
    if not href.startswith(_SAFE_SCHEMES) or "|" in href or ">" in href:
        return inner
    return f"<{href}>" if inner == _slack_escape(href) else f"<{href}|{inner}>"


def _slack_quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def _slack_pre(code: str, language: str) -> str:
    return "```\n" + _slack_escape(code.rstrip("\n")) + "\n```"


TELEGRAM_STYLE = _Style(
    escape=lambda s: html.escape(s, quote=False),
    bold=lambda s: f"<b>{s}</b>" if s else s,
    italic=lambda s: f"<i>{s}</i>" if s else s,
    strike=lambda s: f"<s>{s}</s>" if s else s,
    code=lambda s: f"<code>{html.escape(s, quote=False)}</code>",
    pre=_telegram_pre,
    link=_telegram_link,
    quote=lambda s: f"<blockquote>{s}</blockquote>",
)
SLACK_STYLE = _Style(
    escape=_slack_escape,
    bold=lambda s: f"*{s}*" if s.strip() else s,
    italic=lambda s: f"_{s}_" if s.strip() else s,
    strike=lambda s: f"~{s}~" if s.strip() else s,
    code=lambda s: f"`{_slack_escape(s)}`",
    pre=_slack_pre,
    link=_slack_link,
    quote=_slack_quote,
)


def _wrap(style: _Style, opener: Token, inner: str) -> str:
    kind = opener.type.removesuffix("_open")
    if kind == "strong":
        return style.bold(inner)
    if kind == "em":
        return style.italic(inner)
    if kind == "s":
        return style.strike(inner)
    if kind == "link":
        return style.link(inner, str(opener.attrs.get("href", "")))
    return inner


def _inline(children: Sequence[Token], style: _Style) -> str:
    """One paragraph's or heading's inline tokens in the platform's format."""
    buffers: list[list[str]] = [[]]
    openers: list[Token] = []
    for token in children:
        if token.type in ("text", "html_inline"):
            buffers[-1].append(style.escape(token.content))
        elif token.type in ("softbreak", "hardbreak"):
            buffers[-1].append("\n")
        elif token.type == "code_inline":
            buffers[-1].append(style.code(token.content))
        elif token.type == "image":
            buffers[-1].append(style.escape(token.content))
        elif token.type.endswith("_open"):
            openers.append(token)
            buffers.append([])
        elif token.type.endswith("_close") and openers:
            inner = "".join(buffers.pop())
            buffers[-1].append(_wrap(style, openers.pop(), inner))
    while openers:  # not produced by markdown-it; kept as plain text if ever
        openers.pop()
        inner = "".join(buffers.pop())
        buffers[-1].append(inner)
    return "".join(buffers[0])


@dataclass
class _ListLevel:
    ordered: bool
    number: int


def _leaf(token: Token, inline: str | None, style: _Style) -> str | None:
    if token.type == "inline":
        return inline
    if token.type in ("fence", "code_block"):
        return style.pre(token.content, token.info.strip())
    if token.type == "html_block":
        return style.escape(token.content.rstrip("\n"))
    if token.type == "hr":
        return "\u2014\u2014\u2014"
    return None


def render(markdown: str, style: _Style) -> str:
    """``markdown`` written in ``style`` (``TELEGRAM_STYLE`` or ``SLACK_STYLE``)."""
    lists: list[_ListLevel] = []
    quotes = 0
    heading = tight_paragraph = previous_tight = False
    marker = ""
    out: list[str] = []
    for token in _MARKDOWN.parse(markdown):
        kind = token.type
        if kind in ("bullet_list_open", "ordered_list_open"):
            previous_tight = previous_tight and bool(lists)  # a new list: a blank line first
            start = int(token.attrs.get("start", 1) or 1)
            lists.append(_ListLevel(ordered=kind == "ordered_list_open", number=start))
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif kind == "list_item_open":
            level = lists[-1]
            indent = "  " * (len(lists) - 1)
            marker = f"{indent}{level.number}. " if level.ordered else f"{indent}\u2022 "
            level.number += 1
        elif kind == "blockquote_open":
            quotes += 1
        elif kind == "blockquote_close":
            quotes -= 1
        elif kind in ("heading_open", "heading_close"):
            heading = kind == "heading_open"
        elif kind == "paragraph_open":
            # markdown-it hides the paragraphs of a tight list: their items join by "\n".
            tight_paragraph = token.hidden
        else:
            inline = _inline(token.children or [], style) if kind == "inline" else None
            text = _leaf(token, inline, style)
            if text is None:
                continue
            if heading:
                text = style.bold(text)
            if marker:
                text, marker = marker + text, ""
            for _ in range(quotes):
                text = style.quote(text)
            tight = bool(lists) and kind == "inline" and tight_paragraph
            out.append(("\n" if tight and previous_tight else "\n\n") if out else "")
            out.append(text)
            previous_tight = tight
    return "".join(out)


def slack_cost(char: str) -> int:
    """What one Markdown character may become in mrkdwn: ``&amp;`` 5, ``&lt;``/``&gt;`` 4."""
    return {"&": 5, "<": 4, ">": 4}.get(char, 1)


def _rendered_parts(
    markdown: str,
    *,
    limit: int,
    cost: Callable[[str], int],
    style: _Style,
    measure: Callable[[str], int],
) -> list[str]:
    """The answer cut to ``limit`` and rendered; a part that renders longer than its
    Markdown (an indented code block gains fences) is cut again with less room."""
    rendered: list[str] = []
    for part in split_message(markdown, limit=limit, cost=cost):
        text = render(part.text, style).strip()
        if not text:
            continue
        overflow = measure(text) - limit
        if overflow > 0 and limit - overflow - 16 >= MIN_LIMIT:
            rendered.extend(
                _rendered_parts(
                    part.text,
                    limit=limit - overflow - 16,
                    cost=cost,
                    style=style,
                    measure=measure,
                )
            )
        else:
            rendered.append(text)
    return rendered


def _telegram_visible(text: str) -> int:
    # What Telegram counts: the text once the HTML tags and entities are parsed.
    return sum(utf16_units(c) for c in html.unescape(_TAG_RE.sub("", text)))


def telegram_messages(markdown: str) -> list[str]:
    """The answer as Telegram HTML messages of at most 4,096 UTF-16 units of text each."""
    return _rendered_parts(
        markdown,
        limit=TELEGRAM_LIMIT,
        cost=utf16_units,
        style=TELEGRAM_STYLE,
        measure=_telegram_visible,
    )


def slack_sections(markdown: str) -> list[str]:
    """The answer as mrkdwn texts of at most 3,000 characters (one section block each)."""
    return _rendered_parts(
        markdown, limit=SLACK_SECTION_LIMIT, cost=slack_cost, style=SLACK_STYLE, measure=len
    )
