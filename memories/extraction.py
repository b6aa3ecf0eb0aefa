"""Facts to remember, extracted from a conversation by the ``fast`` tier (docs/architecture.md §12).

Pure functions around one model call, so post-processing needs only a few lines::

    request = extraction_request(messages, language=language_name(language))
    answer = await llm.complete(tier="fast", stage="postprocess", instance=instance,
                                secrets=secrets, chat_id=chat_id, **request)
    saved = await services.afacts_save(instance=instance, user_id=user_id,
                                       chat_id=chat_id, facts=extraction_parse(answer.data))

:func:`extraction_request` builds the messages (an instruction naming the conversation's
language in words, then the conversation as one transcript) and the JSON schema of the
answer; :func:`extraction_parse` validates the model's JSON into :class:`Fact` s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memories.models import Memory

MAX_FACTS = 10
MAX_FACT_CHARS = 500
# The transcript's budget: the newest messages that fit, each cut to MAX_MESSAGE_CHARS.
MAX_TRANSCRIPT_CHARS = 12_000
MAX_MESSAGE_CHARS = 4_000
CATEGORIES = tuple(Memory.Category.values)

# ``{language}`` is the language's name ("Japanese"), not its code.
EXTRACTION_INSTRUCTION = (
    "Read this conversation between a user and an AI assistant and list what is worth "
    "remembering about the user in later conversations: lasting preferences, facts about "
    "them, events in their life, the people in it and decisions they made. Leave out "
    "small talk, one-off requests, what the assistant said about itself, and secrets "
    "(passwords, keys, card numbers). Write each fact as one short, self-contained "
    "sentence about the user in {language}. Categories: preference, fact, event, "
    "relationship, decision, general. Answer with an empty list when nothing is worth "
    "remembering."
)

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": MAX_FACTS,
            "items": {
                "type": "object",
                "properties": {
                    "category": {"type": "string", "enum": list(CATEGORIES)},
                    "content": {"type": "string"},
                },
                "required": ["category", "content"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}


class ExtractionFormatError(ValueError):
    """The model's answer is not ``{"facts": [...]}``."""


@dataclass(frozen=True)
class Fact:
    """One fact to remember: a ``Memory.Category`` value and one sentence."""

    category: str
    content: str


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    lines: list[str] = []
    used = 0
    for message in reversed(messages):
        role = str(message.get("role", ""))
        if role not in ("user", "assistant"):
            continue
        text = str(message.get("content") or "").strip()[:MAX_MESSAGE_CHARS]
        if not text:
            continue
        line = f"{role}: {text}"
        if lines and used + len(line) > MAX_TRANSCRIPT_CHARS:
            break
        lines.append(line)
        used += len(line) + 2
    return "\n\n".join(reversed(lines))


def extraction_request(messages: Sequence[Mapping[str, Any]], *, language: str) -> dict[str, Any]:
    """The keyword arguments ``messages`` and ``response_schema`` of ``openmates.llm.complete``.

    ``messages`` are the conversation's ``{"role", "content"}`` dicts, oldest first (only
    user and assistant turns are read; the newest that fit :data:`MAX_TRANSCRIPT_CHARS`);
    ``language`` is the conversation's language by name ("German"), which the facts are
    written in.
    """
    instruction = EXTRACTION_INSTRUCTION.format(language=language)
    return {
        "messages": [
            {"role": "system", "content": instruction},
            {"role": "user", "content": _transcript(messages)},
        ],
        "response_schema": RESPONSE_SCHEMA,
    }


def extraction_parse(data: Any) -> list[Fact]:
    """The facts of the model's parsed JSON answer, checked, at most :data:`MAX_FACTS`.

    An item that is not an object with a known category and a non-empty text of at most
    :data:`MAX_FACT_CHARS` characters is left out, and so is a repeat of an earlier one
    (same text, ignoring case and surrounding space).

    Raises:
        ExtractionFormatError: ``data`` is not an object with a list ``facts``.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("facts"), list):
        raise ExtractionFormatError('the answer is not an object with a list "facts"')
    facts: list[Fact] = []
    seen: set[str] = set()
    for item in data["facts"]:
        if not isinstance(item, Mapping):
            continue
        category, content = item.get("category"), item.get("content")
        if category not in CATEGORIES or not isinstance(content, str):
            continue
        text = " ".join(content.split())
        if not text or len(text) > MAX_FACT_CHARS or "\x00" in text or text.casefold() in seen:
            continue
        seen.add(text.casefold())
        facts.append(Fact(str(category), text))
        if len(facts) == MAX_FACTS:
            break
    return facts
