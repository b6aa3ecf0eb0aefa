"""Post-processing (DESIGN.md §6), after ``stream.done``; it never fails a turn.

One fast-tier call with a JSON schema gives follow-up suggestions in the conversation's
language, a new title when the topic drifted, and the updated rolling summary. Then the
memory extraction hook runs (the memories app installs it with
:func:`memory_extractor_set`: ``async extractor(*, user_id, instance, chat_id, messages)
-> int`` saved). Skipped for automated requests (the last user message starts with
``### Task:``), and model-based parts are skipped on the bundled local model.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openmates import llm

logger = logging.getLogger(__name__)

TASK_PREFIX = "### Task:"
MAX_FOLLOW_UPS = 4

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
    follow_ups: tuple[str, ...] = ()
    title: str | None = None
    summary: str | None = None
    memories_saved: int = 0


async def postprocess(
    *,
    instance: Any,
    chat_id: str,
    user_id: int,
    language: str,
    title: str | None,
    summary: str | None,
    messages: Sequence[dict[str, str]],
    use_model: bool,
) -> Postprocessed:
    """Follow-ups, title on drift, summary and memories for a finished exchange.

    ``messages`` are the recent ``{"role", "content"}`` messages ending with the reply.
    Errors are logged and give an empty result for that part.
    """
    follow_ups: tuple[str, ...] = ()
    new_title, new_summary = None, None
    if use_model:
        data = await _ask(instance, chat_id, language, title, summary, messages)
        raw = data.get("follow_ups")
        follow_ups = (
            tuple(str(f).strip() for f in raw if str(f).strip())[:MAX_FOLLOW_UPS]
            if isinstance(raw, list)
            else ()
        )
        if data.get("topic_changed") and str(data.get("title") or "").strip():
            new_title = str(data["title"]).strip()[:80]
        new_summary = str(data.get("summary") or "").strip() or None
    saved = 0
    if _memory_extractor is not None and getattr(instance, "memory_enabled", True):
        try:
            saved = int(
                await _memory_extractor(
                    user_id=user_id, instance=instance, chat_id=chat_id, messages=list(messages)
                )
            )
        except Exception:
            logger.exception("memory extraction failed for chat %s", chat_id)
    return Postprocessed(
        follow_ups=follow_ups, title=new_title, summary=new_summary, memories_saved=saved
    )


async def _ask(
    instance: Any,
    chat_id: str,
    language: str,
    title: str | None,
    summary: str | None,
    messages: Sequence[dict[str, str]],
) -> dict[str, Any]:
    transcript = "\n\n".join(f"{m['role']}: {m['content'][:4000]}" for m in messages[-6:])
    instruction = (
        "After this conversation, answer with JSON: follow_ups (up to 4 short questions the "
        f"user might ask next, in language {language}); topic_changed (true when the "
        f"conversation moved away from its title {title!r}); title (a new title when it "
        "did); summary (the conversation so far in at most 5 sentences, updating the "
        f"previous summary: {summary or 'none'})."
    )
    try:
        result = await llm.complete(
            tier="fast",
            messages=[
                {"role": "system", "content": instruction},
                {"role": "user", "content": transcript},
            ],
            instance=instance,
            response_schema=POSTPROCESS_SCHEMA,
            stage="postprocess",
            chat_id=chat_id,
        )
    except Exception:
        logger.exception("post-processing call failed for chat %s", chat_id)
        return {}
    return result.data if isinstance(result.data, dict) else {}
