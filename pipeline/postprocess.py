"""Post-processing (docs/architecture.md §6), after ``stream.done``; it never fails a turn.

One fast-tier call with a JSON schema gives follow-up suggestions, a new title when the
topic drifted, and the updated rolling summary, all in the conversation's language (named
in words in every instruction that writes text for the user: "write ... in Japanese").
Then the memory extraction hook runs: ``pipeline.apps`` installs
``memories.extractor.amemories_extract`` with :func:`memory_extractor_set` (``async
extractor(*, user_id, instance, chat_id, messages, language) -> int`` saved, the language
named in words; it is off by itself for a base model or a user with memory off,
docs/architecture.md §12). Skipped for automated requests (the last user message starts
with ``### Task:``), and model-based parts are skipped on the bundled local model.

The rolling summary covers the conversation up to one message, whose id is kept with it
(``summary_covers``). The per-turn call sees only the last :data:`ASK_VIEW` messages, so
it can extend the summary only when nothing older is uncovered. Older uncovered messages
(a long history imported with ``message.send``, sent with ``chat.history`` after a cache
miss, or left behind by failed post-processing) are first *folded* into the summary
(:func:`summary_fold`): split into blocks that fit the fast tier's context, each block
summarised by its own fast call (:data:`FOLD_CONCURRENCY` at a time), and the block
summaries merged with the previous summary. A message is folded once: the marker moves
past it only when its fold succeeded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from instances.models import Instance
from instances.services import ainstance_tier_secrets_get
from openmates import llm
from pipeline.preprocess import display_line, language_name, plain_text
from pipeline.prompts import estimate_tokens, history_budget_tokens

logger = logging.getLogger(__name__)

TASK_PREFIX = "### Task:"
MAX_FOLLOW_UPS = 4
# Messages the per-turn call sees: the new exchange and the two exchanges before it.
ASK_VIEW = 6
SUMMARY_MAX_CHARS = 2000
# Fast calls of one fold running at once.
FOLD_CONCURRENCY = 4
# Below this many tokens per block a fast model is too small to fold with; skipped.
MIN_BLOCK_TOKENS = 256
# Merge rounds before the merged text is cut instead (each round shrinks it a lot).
MAX_MERGE_ROUNDS = 4

POSTPROCESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "follow_ups": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_FOLLOW_UPS},
        "topic_changed": {"type": "boolean"},
        "title": {"type": "string", "maxLength": 80},
        "summary": {"type": "string", "maxLength": 2000},
    },
    "required": ["follow_ups", "topic_changed", "summary"],
}

MemoryExtractor = Callable[..., Awaitable[int]]
_memory_extractor: MemoryExtractor | None = None


def memory_extractor_set(extractor: MemoryExtractor | None) -> None:
    """Install the memories app's extraction hook (``None`` removes it)."""
    global _memory_extractor
    _memory_extractor = extractor


def is_automated(content: str) -> bool:
    """Whether the message is an automated request that skips post-processing."""
    return content.lstrip().startswith(TASK_PREFIX)


@dataclass(frozen=True, slots=True)
class Postprocessed:
    """What post-processing produced; ``summary`` is set only when the rolling summary
    changed, with ``summary_covers`` the id of the last message it now covers."""

    follow_ups: tuple[str, ...] = ()
    title: str | None = None
    summary: str | None = None
    summary_covers: str | None = None
    memories_saved: int = 0


async def postprocess(
    *,
    instance: Instance,
    chat_id: str,
    user_id: int,
    language: str,
    title: str | None,
    summary: str | None,
    summary_covers: str | None,
    conversation: Sequence[dict[str, Any]],
    fast_context_tokens: int,
    use_model: bool,
) -> Postprocessed:
    """Follow-ups, title on drift, summary and memories for a finished exchange.

    ``conversation`` is the whole chat as ``{"message_id", "role", "content"}`` dicts,
    oldest first, ending with the new user message and the reply. ``summary_covers`` is
    the id of the last message ``summary`` covers (None: unknown, e.g. a summary from the
    client). ``fast_context_tokens`` is the fast tier's context (for folding). Errors are
    logged and give an empty result for that part.
    """
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in conversation]
    recent = messages[-ASK_VIEW:]
    done = Postprocessed()
    if use_model:
        done = await _model_postprocess(
            instance=instance,
            chat_id=chat_id,
            language=language,
            title=title,
            summary=summary,
            summary_covers=summary_covers,
            conversation=conversation,
            recent=recent,
            fast_context_tokens=fast_context_tokens,
        )
    saved = await _memories_extract(
        instance=instance, user_id=user_id, chat_id=chat_id, recent=recent, language=language
    )
    return replace(done, memories_saved=saved)


async def _model_postprocess(
    *,
    instance: Instance,
    chat_id: str,
    language: str,
    title: str | None,
    summary: str | None,
    summary_covers: str | None,
    conversation: Sequence[dict[str, Any]],
    recent: list[dict[str, str]],
    fast_context_tokens: int,
) -> Postprocessed:
    """The model-based part: the gap folded into the summary, then the per-turn call."""
    rolling, rolling_covers, complete = await _fold_gap(
        instance=instance,
        chat_id=chat_id,
        language=language,
        summary=summary,
        summary_covers=summary_covers,
        conversation=conversation,
        fast_context_tokens=fast_context_tokens,
    )
    data = await _ask(instance, chat_id, language, title, rolling, recent, fast_context_tokens)
    raw = data.get("follow_ups")
    follow_ups = (
        tuple(line for f in raw if (line := display_line(str(f))))[:MAX_FOLLOW_UPS]
        if isinstance(raw, list)
        else ()
    )
    new_title, new_summary, covers = None, None, None
    title_line = display_line(plain_text(str(data.get("title") or "")))
    if data.get("topic_changed") and title_line:
        new_title = title_line[:80]
    asked = str(data.get("summary") or "").strip() or None
    if complete and asked and conversation:
        new_summary, covers = asked, str(conversation[-1]["message_id"])
    elif rolling_covers != summary_covers:
        new_summary, covers = rolling, rolling_covers
    return Postprocessed(
        follow_ups=follow_ups, title=new_title, summary=new_summary, summary_covers=covers
    )


async def _memories_extract(
    *,
    instance: Instance,
    user_id: int,
    chat_id: str,
    recent: list[dict[str, str]],
    language: str,
) -> int:
    """How many memories the installed extraction hook saved from ``recent`` (0 without
    one, when the instance has memories off, or when it failed: logged). ``language``:
    the conversation's ISO 639 code (the hook gets its name)."""
    if _memory_extractor is None or not instance.memory_enabled:
        return 0
    try:
        return int(
            await _memory_extractor(
                user_id=user_id,
                instance=instance,
                chat_id=chat_id,
                messages=recent,
                language=language_name(language),
            )
        )
    except Exception:
        logger.exception("memory extraction failed for chat %s", chat_id)
        return 0


def summary_gap(
    conversation: Sequence[dict[str, Any]], summary_covers: str | None
) -> list[dict[str, Any]]:
    """The messages the rolling summary does not cover and the per-turn call will not see.

    Those after the message ``summary_covers`` names (all of them when it is None or not
    in ``conversation``), except the last :data:`ASK_VIEW`.
    """
    start = 0
    if summary_covers is not None:
        for index, message in enumerate(conversation):
            if str(message.get("message_id")) == summary_covers:
                start = index + 1
                break
    end = len(conversation) - ASK_VIEW
    return list(conversation[start:end]) if end > start else []


async def _fold_gap(
    *,
    instance: Instance,
    chat_id: str,
    language: str,
    summary: str | None,
    summary_covers: str | None,
    conversation: Sequence[dict[str, Any]],
    fast_context_tokens: int,
) -> tuple[str | None, str | None, bool]:
    """``(summary, covers, complete)`` after folding the gap, if any; ``complete`` is
    False when a gap is left (the fold failed or the fast model is too small)."""
    gap = summary_gap(conversation, summary_covers)
    if not gap:
        return summary, summary_covers, True
    try:
        folded = await summary_fold(
            gap,
            previous=summary,
            language=language,
            instance=instance,
            chat_id=chat_id,
            context_tokens=fast_context_tokens,
        )
    except Exception:
        logger.exception(
            "folding %d messages into the summary failed for chat %s", len(gap), chat_id
        )
        return summary, summary_covers, False
    if folded is None:
        return summary, summary_covers, False
    return folded, str(gap[-1]["message_id"]), True


# ``{language}`` is the language's name (preprocess.language_name), not its code.
BLOCK_INSTRUCTION = (
    "Summarise this part of a conversation between a user and an AI assistant in at most "
    "5 sentences. Keep names, facts, decisions and open questions. Write the summary in "
    "{language}. Answer with the summary only."
)
MERGE_INSTRUCTION = (
    "These are summaries of consecutive parts of one conversation, oldest first. Merge them "
    "into one summary of at most 8 sentences. Keep names, facts, decisions and open "
    "questions. Write the summary in {language}. Answer with the summary only."
)


async def summary_fold(
    messages: Sequence[dict[str, Any]],
    *,
    previous: str | None,
    language: str,
    instance: Instance,
    chat_id: str,
    context_tokens: int,
) -> str | None:
    """``previous`` (may be None) extended by ``messages`` (``{"role", "content"}``,
    oldest first), as one summary of at most :data:`SUMMARY_MAX_CHARS` characters.

    The messages are packed into blocks that fit a ``context_tokens`` fast model with
    its instruction and answer reserve (a single longer message is cut), each block is
    summarised by one fast call, :data:`FOLD_CONCURRENCY` at a time, and the previous
    summary and the block summaries are merged: kept as their concatenation when that
    is at most :data:`SUMMARY_MAX_CHARS`, else merged by one more fast call (or, when
    they do not fit one call, by rounds of calls over groups). Returns None when the
    fast model's context is too small to fold with.

    Raises:
        openmates.llm.LLMError: a fast call failed (nothing is folded then).
        ValueError: a fast call answered with no text.
    """
    name = language_name(language)
    block_budget = _text_budget(BLOCK_INSTRUCTION.format(language=name), context_tokens)
    merge_budget = _text_budget(MERGE_INSTRUCTION.format(language=name), context_tokens)
    if min(block_budget, merge_budget) < MIN_BLOCK_TOKENS:
        logger.warning("chat %s: the fast model's context is too small to fold", chat_id)
        return None
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    blocks = text_blocks(lines, block_budget)

    async def summarise(instruction: str, text: str) -> str:
        return await _summary_call(
            instruction.format(language=name), text, instance=instance, chat_id=chat_id
        )

    pieces = [previous] if previous else []
    pieces += await gather_bounded(
        [partial(summarise, BLOCK_INSTRUCTION, "\n\n".join(block)) for block in blocks],
        limit=FOLD_CONCURRENCY,
    )
    for _ in range(MAX_MERGE_ROUNDS):
        joined = "\n\n".join(pieces)
        if len(joined) <= SUMMARY_MAX_CHARS:
            return joined
        labelled = [f"Part {n}:\n{piece}" for n, piece in enumerate(pieces, 1)]
        groups = text_blocks(labelled, merge_budget)
        pieces = await gather_bounded(
            [partial(summarise, MERGE_INSTRUCTION, "\n\n".join(group)) for group in groups],
            limit=FOLD_CONCURRENCY,
        )
        if len(pieces) == 1:
            return pieces[0]
    return "\n\n".join(pieces)[:SUMMARY_MAX_CHARS]


def _text_budget(system: str, context_tokens: int) -> int:
    """Tokens left for the one user message sent after the ``system`` text."""
    # The text itself is one user message: its overhead is part of the fixed cost.
    return history_budget_tokens(
        context_tokens=context_tokens,
        fixed_messages=[{"role": "system", "content": system}, {"role": "user", "content": ""}],
    )


def text_blocks(texts: Sequence[str], budget_tokens: int) -> list[list[str]]:
    """``texts`` packed in order into blocks of at most ``budget_tokens`` estimated tokens
    (joined by blank lines); a text longer than the budget is cut to fit, alone."""
    blocks: list[list[str]] = []
    current: list[str] = []
    used = 0
    for text in texts:
        text = _cut(text, budget_tokens)
        cost = estimate_tokens(text) + 1  # the blank line joining it to the next
        if current and used + cost > budget_tokens:
            blocks.append(current)
            current, used = [], 0
        current.append(text)
        used += cost
    if current:
        blocks.append(current)
    return blocks


def _cut(text: str, budget_tokens: int) -> str:
    limit = max(1, budget_tokens - 2)  # room for the ellipsis and the separator
    while estimate_tokens(text) > limit:
        text = text[: max(0, len(text) * limit // estimate_tokens(text) - 1)] + "…"
    return text


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[str]]], *, limit: int) -> list[str]:
    """The results of ``calls`` in order, at most ``limit`` running at once.

    Raises:
        ExceptionGroup: a call failed (the others are cancelled).
    """
    semaphore = asyncio.Semaphore(limit)

    async def run(call: Callable[[], Awaitable[str]]) -> str:
        async with semaphore:
            return await call()

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(run(call)) for call in calls]
    return [task.result() for task in tasks]


async def _summary_call(instruction: str, text: str, *, instance: Instance, chat_id: str) -> str:
    result = await llm.complete(
        tier="fast",
        messages=[
            {"role": "system", "content": instruction},
            {"role": "user", "content": text},
        ],
        instance=instance,
        secrets=await ainstance_tier_secrets_get(instance=instance),
        stage="postprocess",
        chat_id=chat_id,
    )
    summary = result.text.strip()
    if not summary:
        raise ValueError("the fast model answered a summary call with no text")
    return summary[:SUMMARY_MAX_CHARS]


async def _ask(
    instance: Instance,
    chat_id: str,
    language: str,
    title: str | None,
    summary: str | None,
    messages: Sequence[dict[str, str]],
    context_tokens: int,
) -> dict[str, Any]:
    name = language_name(language)
    instruction = (
        "After this conversation, answer with JSON: follow_ups (up to 4 short questions the "
        "user might ask next); topic_changed (true when the conversation moved away from "
        f"its title {title!r}); title (a new title of at most 8 words when it did); summary "
        "(the conversation so far in at most 5 sentences, updating the previous summary: "
        f"{summary or 'none'}). The conversation is in {name}: write the follow-ups, the "
        f"title and the summary in {name}."
    )
    # Each message gets an equal share of what the fast context leaves (and 4,000
    # characters at most), so a long exchange never overflows a small fast model.
    budget = _text_budget(instruction, context_tokens)
    share = max(1, budget // max(1, len(messages)) - 1)
    transcript = "\n\n".join(
        _cut(f"{m['role']}: {m['content'][:4000]}", share) for m in messages[-ASK_VIEW:]
    )
    try:
        result = await llm.complete(
            tier="fast",
            messages=[
                {"role": "system", "content": instruction},
                {"role": "user", "content": transcript},
            ],
            instance=instance,
            secrets=await ainstance_tier_secrets_get(instance=instance),
            response_schema=POSTPROCESS_SCHEMA,
            stage="postprocess",
            chat_id=chat_id,
        )
    except Exception:
        logger.exception("post-processing call failed for chat %s", chat_id)
        return {}
    return result.data if isinstance(result.data, dict) else {}
