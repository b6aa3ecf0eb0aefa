"""Prompt assembly for the main model (docs/architecture.md §6, main processing).

System prompt = the instance's prompt sections + the mate + ethics + the instructions of
the skills whose tools were preselected + date/time + retrieved memories. History = the
rolling summary as a synthetic exchange + at most ``MAX_HISTORY`` recent messages,
trimmed to what the chosen tier's context leaves (:func:`history_budget_tokens`); cached
assistant messages name their embeds (``embeds``: ids), resolved to the embed content
here.

Token counts are estimates (:func:`estimate_tokens`), not a tokenizer's count: the main
model may be any provider's, and a real tokenizer per follow-up would cost milliseconds
of the overhead budget (docs/architecture.md §10). The estimate leans high on purpose.

Tool output (already screened, :mod:`pipeline.tool_output`) is fitted too: a cached
embed replayed in the history takes at most :data:`HISTORY_TOOL_OUTPUT_SHARE` of the
history budget, and after each tool round :func:`tool_results_fit` cuts the turn's tool
results to what the context leaves before the next model call (fair shares, an explicit
``[truncated: N of M characters shown]`` marker; older history is dropped first when not
even :data:`MIN_TOOL_RESULT_TOKENS` per result would fit).

Memories come through :func:`memory_retriever_set`, which ``pipeline.apps`` calls at
start-up with ``memories.search.amemories_for_prompt`` (``async retriever(*, user_id,
instance, query, categories) -> list[str]``, best first); :func:`memories_retrieve` keeps
what fits :data:`MEMORY_BUDGET_TOKENS` (docs/architecture.md §12). Without a retriever
no memories are used.
"""

from __future__ import annotations

import csv
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline.preprocess import language_name
from pipeline.tool_output import (
    UNTRUSTED_NOTE,
    embed_tool_text,
    fence_tool_output,
    tool_output_escape,
)

logger = logging.getLogger(__name__)

MAX_HISTORY = 15
# Tokens kept free for the answer: this many, at most a quarter of the context.
ANSWER_RESERVE_TOKENS = 4096
# Per message in the chat format (role, separators), as OpenAI's counting guide adds.
MESSAGE_OVERHEAD_TOKENS = 4
SECTION_ORDER = ("identity", "persona", "tooling", "safety", "skills", "memory", "user", "datetime")
ETHICS = (
    "Be honest about uncertainty and about being an AI. Do not help with harm to people, "
    "crime or attacks on systems. Respect privacy: use personal details only for this user."
)
# A tool result cut to fit keeps at least this many tokens (older history goes first).
MIN_TOOL_RESULT_TOKENS = 64
# At most this part of the history budget for one replayed tool output.
HISTORY_TOOL_OUTPUT_SHARE = 0.25
TRUNCATION_MARKER = "[truncated: {shown} of {total} characters shown]"
# Question/answer pairs per language that show a base model the transcript's form and
# the answer's language (tab-separated: lang, question, answer).
BASE_MODEL_EXAMPLES_FILE = Path(__file__).with_name("base_model_examples.tsv")

# What retrieved memories may take of the system prompt (estimated tokens), and per
# memory for its list marker and line break.
MEMORY_BUDGET_TOKENS = 500
MEMORY_LINE_TOKENS = 2

MemoryRetriever = Callable[..., Awaitable[list[str]]]
_memory_retriever: MemoryRetriever | None = None


def memory_retriever_set(retriever: MemoryRetriever | None) -> None:
    """Install the memories app's retriever (``None`` removes it)."""
    global _memory_retriever
    _memory_retriever = retriever


async def memories_retrieve(
    *, user_id: int | str, instance: Any, query: str, categories: Sequence[str]
) -> list[str]:
    """Memory texts relevant to ``query`` in the allowed ``categories``, best first,
    together at most :data:`MEMORY_BUDGET_TOKENS` estimated tokens (may be empty).

    Nothing is asked of the retriever without allowed categories. Memories are an aid,
    not part of the answer: a retriever that fails (Vault, the embedding model) is
    logged and the turn goes on without them.
    """
    if _memory_retriever is None or not categories:
        return []
    try:
        found = await _memory_retriever(
            user_id=user_id, instance=instance, query=query, categories=list(categories)
        )
    except Exception:
        logger.exception("memories could not be retrieved for user %s", user_id)
        return []
    kept: list[str] = []
    used = 0
    for text in found:
        used += estimate_tokens(str(text)) + MEMORY_LINE_TOKENS
        if used > MEMORY_BUDGET_TOKENS:
            break
        kept.append(str(text))
    return kept


def system_prompt_build(
    *,
    sections: dict[str, str],
    mate: Any | None,
    skill_prompts: Sequence[dict[str, str]],
    now: datetime,
    language: str,
    memories: Sequence[str],
    has_tools: bool,
) -> str:
    """The system prompt text (sections separated by blank lines).

    ``has_tools``: whether the call's messages may hold tool output (tools offered, or
    tool output in the history), which adds :data:`UNTRUSTED_NOTE`. ``language``: the
    ISO 639 code of the conversation, named in words in the prompt.
    """
    parts = [sections[key].strip() for key in SECTION_ORDER if sections.get(key, "").strip()]
    if mate is not None and str(getattr(mate, "system_prompt", "") or ""):
        parts.append(f"You are acting as {mate.name}: {mate.system_prompt.strip()}")
    parts.append(ETHICS)
    parts.extend(
        f"{skill['name']}: {skill['instructions'].strip()}"
        for skill in skill_prompts
        if skill.get("instructions", "").strip()
    )
    if has_tools:
        parts.append(UNTRUSTED_NOTE)
    parts.append(f"Current date and time: {now.strftime('%A, %Y-%m-%d %H:%M %Z').strip()}.")
    parts.append(
        f"Answer in the language of the user's message (detected: {language_name(language)})."
    )
    if memories:
        listed = "\n".join(f"- {memory}" for memory in memories)
        parts.append(f"What you remember about the user (use only when relevant):\n{listed}")
    return "\n\n".join(parts)


def base_model_header(*, name: str, now: datetime, language: str, memories: Sequence[str]) -> str:
    """The system text for a base model (the bundled local one): a line that describes
    the assistant in the third person, the date, the memories as facts, and two
    question/answer pairs in the conversation's ``language`` (English when
    :data:`BASE_MODEL_EXAMPLES_FILE` has none for it).

    A base model is not instruction-tuned: it continues text. Given the instance's
    sections (instructions in the second person, about 1,500 characters) the bundled
    Gemma 3 270M echoed them, ran on for hundreds of tokens or answered with an empty
    list; given this header and the ``Q:``/``A:`` transcript of
    ``openmates.llm_stream.base_model_prompt``, it answers in a sentence, in the
    question's language. The instance's sections, mate and skill instructions are
    therefore not sent to a base model (docs/architecture.md §6).
    """
    lines = [
        f"{name} is a friendly, helpful AI assistant. It answers each question correctly "
        "and briefly, in the language of the question. "
        f"Today is {now.strftime('%A, %Y-%m-%d')}."
    ]
    if memories:
        facts = (
            m.strip() if m.strip().endswith((".", "!", "?")) else f"{m.strip()}." for m in memories
        )
        lines.append("Facts about the person asking: " + " ".join(facts))
    pairs = _base_model_examples().get(language) or _base_model_examples()["en"]
    examples = "".join(f"Q: {question}\nA: {answer}\n" for question, answer in pairs)
    return "\n\n".join([*lines, examples.rstrip()])


@functools.cache
def _base_model_examples() -> dict[str, tuple[tuple[str, str], ...]]:
    """:data:`BASE_MODEL_EXAMPLES_FILE` as ``{language: ((question, answer), ...)}``."""
    found: dict[str, list[tuple[str, str]]] = {}
    with BASE_MODEL_EXAMPLES_FILE.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            found.setdefault(row["lang"], []).append((row["question"], row["answer"]))
    return {language: tuple(pairs) for language, pairs in found.items()}


def estimate_tokens(text: str) -> int:
    """An upper-leaning token estimate for ``text``: ASCII characters count 1/4 token,
    every other character one token.

    English prose is ~4 characters per token in common BPE vocabularies; accented,
    Cyrillic, Greek and CJK characters take one or more tokens each, so counting them as
    one keeps mixed and non-Latin text from being underestimated. Code and numbers
    (shorter tokens) can still exceed it slightly, which the answer reserve absorbs.
    """
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return (len(text) - non_ascii + 3) // 4 + non_ascii


def estimate_message_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """:func:`estimate_tokens` over chat messages' ``content`` (and an assistant's
    ``tool_calls`` as JSON, a tool message's ``tool_call_id``), plus the per-message
    overhead (:data:`MESSAGE_OVERHEAD_TOKENS`)."""
    total = 0
    for message in messages:
        total += estimate_tokens(str(message.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS
        if message.get("tool_calls"):
            total += estimate_tokens(json.dumps(message["tool_calls"], default=str))
        if message.get("tool_call_id"):
            total += estimate_tokens(str(message["tool_call_id"]))
    return total


def answer_reserve_tokens(context_tokens: int) -> int:
    """Tokens of a ``context_tokens`` context left free for the model's answer."""
    return min(ANSWER_RESERVE_TOKENS, context_tokens // 4)


def history_budget_tokens(
    *,
    context_tokens: int,
    fixed_messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
) -> int:
    """Tokens the recent history may use in a call to a ``context_tokens`` model.

    ``fixed_messages`` are the parts that are always sent (system prompt, summary
    exchange, the new user message); ``tools`` the tool schemas sent with the call. The
    answer reserve (:func:`answer_reserve_tokens`) is kept free. Never negative.
    """
    used = estimate_message_tokens(fixed_messages)
    used += sum(estimate_tokens(json.dumps(tool)) for tool in tools)
    return max(0, context_tokens - answer_reserve_tokens(context_tokens) - used)


EmbedLoader = Callable[[str], Awaitable[dict[str, Any] | None]]


async def history_messages(
    history: Sequence[dict[str, Any]], *, load_embed: EmbedLoader, budget_tokens: int
) -> list[dict[str, str]]:
    """The recent history as model messages: the newest ones (at most ``MAX_HISTORY``)
    whose estimated tokens together stay within ``budget_tokens``, oldest first, never
    starting with an assistant message. A message that does not fit ends the window:
    older ones are left to the rolling summary.

    A message's embeds are appended to it as fenced, screened tool output, each cut to
    :data:`HISTORY_TOOL_OUTPUT_SHARE` of the budget. Messages left with no text (a reply
    that produced none) are dropped: providers refuse empty assistant messages.
    """
    recent = [m for m in history if m.get("role") in ("user", "assistant")][-MAX_HISTORY:]
    embed_tokens = max(MIN_TOOL_RESULT_TOKENS, int(budget_tokens * HISTORY_TOOL_OUTPUT_SHARE))
    rendered: list[dict[str, str]] = []
    for message in recent:
        parts = [str(message.get("content") or "")]
        for embed_id in message.get("embeds") or []:
            embed = await load_embed(str(embed_id))
            if embed is not None:
                text = text_truncate(tool_output_escape(embed_tool_text(embed)), embed_tokens)
                parts.append(fence_tool_output(str(embed.get("tool", "tool")), text))
        content = "\n".join(part for part in parts if part.strip())
        if content:
            rendered.append({"role": str(message["role"]), "content": content})
    total = 0
    kept: list[dict[str, str]] = []
    for message in reversed(rendered):
        total += estimate_message_tokens([message])
        if total > budget_tokens:
            break
        kept.append(message)
    kept.reverse()
    # A history must not start with an orphaned assistant message.
    while kept and kept[0]["role"] == "assistant":
        kept.pop(0)
    return kept


def history_has_tool_output(history: Sequence[dict[str, Any]]) -> bool:
    """Whether the recent history (the messages :func:`history_messages` may send)
    references embeds, whose tool output it would replay."""
    recent = [m for m in history if m.get("role") in ("user", "assistant")][-MAX_HISTORY:]
    return any(m.get("embeds") for m in recent)


def summary_exchange(summary: str | None) -> list[dict[str, str]]:
    """The rolling summary as a synthetic user/assistant exchange (empty without one,
    or when it is blank: no empty assistant message goes to a provider)."""
    if not summary or not summary.strip():
        return []
    return [
        {"role": "user", "content": "What have we discussed so far?"},
        {"role": "assistant", "content": summary},
    ]


def text_truncate(text: str, max_tokens: int) -> str:
    """``text`` when its estimate is at most ``max_tokens``; else its longest prefix
    that, followed by a newline and :data:`TRUNCATION_MARKER`, fits ``max_tokens``
    (only the marker when not even that fits)."""
    if estimate_tokens(text) <= max_tokens:
        return text

    def cut(length: int) -> str:
        marker = TRUNCATION_MARKER.format(shown=length, total=len(text))
        return f"{text[:length]}\n{marker}" if length else marker

    low, high = 0, len(text) - 1
    while low < high:  # the longest prefix whose cut form fits
        middle = (low + high + 1) // 2
        if estimate_tokens(cut(middle)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return cut(low)


def fair_shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Tokens for each of ``sizes`` out of ``budget``: an equal share each, what a small
    item leaves unused going to the larger ones (max-min fair); never above its size."""
    shares = [0] * len(sizes)
    remaining = max(0, budget)
    order = sorted(range(len(sizes)), key=lambda index: sizes[index])
    for position, index in enumerate(order):
        share = min(sizes[index], remaining // (len(order) - position))
        shares[index] = share
        remaining -= share
    return shares


def _history_drop_oldest(messages: list[dict[str, Any]]) -> bool:
    """Drop the oldest history message (after the system prompt, before the turn's
    user message), and assistant messages it would leave first; False when none."""
    start = 1 if messages and messages[0].get("role") == "system" else 0
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    question = users[-1] if users else start
    if question <= start:
        return False
    del messages[start]
    question -= 1
    while question > start and messages[start].get("role") == "assistant":
        del messages[start]
        question -= 1
    return True


def tool_results_fit(
    messages: list[dict[str, Any]],
    results: dict[str, tuple[str, str]],
    *,
    context_tokens: int,
    tools: Sequence[dict[str, Any]] = (),
) -> None:
    """Cut the tool messages named in ``results`` so ``messages`` fit the next call.

    ``messages``: the call's chat messages (system prompt first, the turn's user message
    the last user one, the tool rounds after it), changed in place. ``results``:
    ``tool_call_id`` → ``(tool name, full screened text)`` of the turn's tool results;
    each such tool message is rewritten as the fenced text, cut by
    :func:`text_truncate` to its :func:`fair_shares` share of what the context
    (``context_tokens``, less the answer reserve, the other messages and the ``tools``
    schemas) leaves. When that is less than :data:`MIN_TOOL_RESULT_TOKENS` per result
    (or a smaller result's whole size), the oldest history messages are dropped first.
    """
    fitted = [m for m in messages if m.get("role") == "tool" and m.get("tool_call_id") in results]
    texts = {id(m): tool_output_escape(results[m["tool_call_id"]][1]) for m in fitted}
    sizes = [estimate_tokens(texts[id(m)]) for m in fitted]
    schema_tokens = sum(estimate_tokens(json.dumps(tool)) for tool in tools)

    fitted_ids = {id(m) for m in fitted}

    def available() -> int:
        others = [m for m in messages if id(m) not in fitted_ids]
        shells = [
            {**m, "content": fence_tool_output(results[m["tool_call_id"]][0], "")} for m in fitted
        ]
        used = estimate_message_tokens(others) + estimate_message_tokens(shells) + schema_tokens
        return context_tokens - answer_reserve_tokens(context_tokens) - used

    minimum = sum(min(size, MIN_TOOL_RESULT_TOKENS) for size in sizes)
    while available() < minimum and _history_drop_oldest(messages):
        pass
    shares = fair_shares(sizes, available())
    for message, share in zip(fitted, shares, strict=True):
        tool = results[message["tool_call_id"]][0]
        message["content"] = fence_tool_output(tool, text_truncate(texts[id(message)], share))
