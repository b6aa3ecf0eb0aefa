"""The LLM gateway's own event types and the stream normaliser (no LiteLLM in here).

``openmates.llm`` feeds every chunk a provider streams (OpenAI's chunk shape, as LiteLLM
hands it over: ``chunk.choices[0].delta.content`` / ``.tool_calls``, ``finish_reason``,
``chunk.usage``) into a :class:`StreamNormaliser`, which turns them into the project's
events. The normaliser is where providers' quirks are absorbed:

* parallel tool calls that all arrive with ``index`` 0 but different ids are told apart
  by id, while continuation fragments (same index, no id) extend the latest call;
* argument fragments are joined; an empty argument string means ``{}``;
* text and a tool call in one delta both count;
* ``finish_reason: stop`` after streamed tool calls is reported as ``tool_calls``;
* a stream that ends inside tool arguments (invalid JSON, or no finish at all) gives a
  :class:`StreamError` and its calls are never reported, so they are never executed;
* tool-call markup that some models write into the visible text (``<tool_call>…``,
  ``[TOOL_CALLS]…``) is filtered out of the text, even when split across chunks.

It also holds the prompt format for base models served through a completions endpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Visible text the model produced since the previous delta."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A complete tool call: ``arguments`` is the parsed JSON object."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the provider reported for the whole call."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream ended normally; ``reason`` is ``stop``, ``length`` or ``tool_calls``."""

    reason: str
    model: str


@dataclass(frozen=True, slots=True)
class StreamError:
    """The call failed. ``code`` is stable (see ``openmates.llm.ERROR_CODES``); ``message``
    is written for people and never echoes the provider's text (which may quote the prompt).
    """

    code: str
    message: str
    retryable: bool


LLMEvent = TextDelta | ToolCall | Usage | Finish | StreamError


@dataclass(frozen=True, slots=True)
class Completion:
    """The result of a non-streaming call.

    ``data`` is the parsed JSON object when a response schema was given, else ``None``.
    """

    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    finish_reason: str
    model: str
    data: Any = None


# Markup some models (or providers that do not parse their output) write into the text
# instead of a structured tool call. ``None`` as the end means "until the stream ends".
TOOL_MARKUP: tuple[tuple[str, str | None], ...] = (
    ("<tool_call>", "</tool_call>"),
    ("<tool_calls>", "</tool_calls>"),
    ("<|tool_call_start|>", "<|tool_call_end|>"),
    ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),  # noqa: RUF001 (DeepSeek's tokens)
    ("<function=", "</function>"),
    ("<|python_tag|>", None),
    ("[TOOL_CALLS]", None),
)
# Every marker starts with one of these; text without them needs no marker search.
_MARKER_START = re.compile(
    "[" + "".join(sorted({re.escape(opening[0]) for opening, _ in TOOL_MARKUP})) + "]"
)


class ToolMarkupFilter:
    """Removes tool-call markup from streamed text.

    Text that might be the start of a marker is held back until the next piece shows
    whether it is one, so a marker split across chunks is still caught.
    """

    def __init__(self) -> None:
        self._pending = ""
        self._closing: str | None = None
        self._inside = False
        self.seen_markup = False

    def feed(self, text: str) -> str:
        """Add streamed text; return the part that is safe to show now."""
        if not self._pending and not self._inside and not _may_hold_marker(text):
            return text  # the common case, one short piece per token: nothing to search
        self._pending += text
        shown: list[str] = []
        while self._pending:
            if self._inside:
                if not self._skip_markup():
                    break
                continue
            if not self._take_text(shown):
                break
        return "".join(shown)

    def flush(self) -> str:
        """End of stream: return held-back text that turned out not to be a marker."""
        rest = "" if self._inside else self._pending
        self._pending = ""
        return rest

    def _skip_markup(self) -> bool:
        closing = self._closing
        if closing is None:
            self._pending = ""
            return False
        end = self._pending.find(closing)
        if end < 0:
            self._pending = self._pending[-(len(closing) - 1) :] if len(closing) > 1 else ""
            return False
        self._pending = self._pending[end + len(closing) :]
        self._inside = False
        return True

    def _take_text(self, shown: list[str]) -> bool:
        start, opening, closing = self._first_marker()
        if start >= 0:
            shown.append(self._pending[:start])
            self._pending = self._pending[start + len(opening) :]
            self._inside, self._closing, self.seen_markup = True, closing, True
            return True
        keep = self._partial_marker_length()
        cut = len(self._pending) - keep
        shown.append(self._pending[:cut])
        self._pending = self._pending[cut:]
        return False

    def _first_marker(self) -> tuple[int, str, str | None]:
        best: tuple[int, str, str | None] = (-1, "", None)
        for opening, closing in TOOL_MARKUP:
            at = self._pending.find(opening)
            if at >= 0 and (best[0] < 0 or at < best[0]):
                best = (at, opening, closing)
        return best

    def _partial_marker_length(self) -> int:
        # The longest tail of the pending text that a marker could still start with.
        longest = 0
        for opening, _ in TOOL_MARKUP:
            for size in range(min(len(opening) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(opening[:size]):
                    longest = size
                    break
        return longest


def _may_hold_marker(text: str) -> bool:
    return _MARKER_START.search(text) is not None


def strip_tool_markup(text: str) -> str:
    """Remove tool-call markup from a whole (non-streamed) text."""
    markup = ToolMarkupFilter()
    return markup.feed(text) + markup.flush()


def parse_tool_arguments(raw: str) -> dict[str, Any] | None:
    """Parse a tool call's argument string; ``""`` means ``{}``.

    Returns ``None`` when the string is not a JSON object (a cut or malformed call).
    """
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


_ABSENT = object()


def _field(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, without its cost on LiteLLM's chunk objects.

    LiteLLM keeps a streamed choice's and delta's fields as pydantic *extras*, which a
    plain ``getattr`` reaches only through pydantic's ``__getattr__`` (about 1 µs each,
    2.5 µs when the attribute is absent, against 0.1 µs here); with half a dozen reads
    per chunk that was a noticeable part of streaming a long answer. Looks in the
    instance dict, then in the pydantic extras, then falls back to ``getattr`` (class
    attributes, properties, other object types): the same value as ``getattr`` for
    pydantic models and plain objects.
    """
    values = getattr(obj, "__dict__", None)
    if values is not None:
        value = values.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
    extra = getattr(obj, "__pydantic_extra__", None)
    if extra is not None:
        value = extra.get(name, _ABSENT)
        if value is not _ABSENT:
            return value
    return getattr(obj, name, None)


@dataclass(slots=True)
class _PendingCall:
    id: str | None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamNormaliser:
    """Turns OpenAI-shaped stream chunks into :data:`LLMEvent` values.

    Call :meth:`feed` for every chunk (it returns the text deltas to show now) and
    :meth:`finish` once the provider's stream ended; tool calls, usage and the finish
    (or a :class:`StreamError` for a cut stream) come from :meth:`finish`.
    """

    def __init__(self) -> None:
        self._calls: list[_PendingCall] = []
        self._latest_at: dict[int, _PendingCall] = {}
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self.markup = ToolMarkupFilter()

    def feed(self, chunk: Any) -> list[LLMEvent]:
        """Take one chunk; return the text to show (zero or one :class:`TextDelta`)."""
        usage = _field(chunk, "usage")
        if usage is not None:
            self._usage = Usage(
                int(_field(usage, "prompt_tokens") or 0),
                int(_field(usage, "completion_tokens") or 0),
            )
        text = ""
        for choice in _field(chunk, "choices") or ():
            if _field(choice, "index"):
                continue  # n > 1 is never requested; extra choices are ignored
            delta = _field(choice, "delta")
            if delta is not None:
                text += _field(delta, "content") or ""
                for fragment in _field(delta, "tool_calls") or ():
                    self._add_fragment(fragment)
            else:
                text += _field(choice, "text") or ""  # a completions-endpoint chunk
            finish_reason = _field(choice, "finish_reason")
            if finish_reason:
                self._finish_reason = str(finish_reason)
        shown = self.markup.feed(text) if text else ""
        return [TextDelta(shown)] if shown else []

    def finish(self, model: str) -> list[LLMEvent]:
        """The provider's stream ended: the remaining text, tool calls, usage, finish."""
        events: list[LLMEvent] = []
        tail = self.markup.flush()
        if tail:
            events.append(TextDelta(tail))
        calls = self._complete_calls()
        if calls is None:
            events.append(
                StreamError(
                    "stream_cut",
                    "The model's answer ended in the middle of a tool call.",
                    retryable=True,
                )
            )
            return events
        if self._finish_reason is None:
            events.append(StreamError("stream_cut", "The model's answer ended unexpectedly.", True))
            return events
        events.extend(calls)
        if self._usage is not None:
            events.append(self._usage)
        reason = "tool_calls" if calls else self._finish_reason
        events.append(Finish(reason, model))
        return events

    def _add_fragment(self, fragment: Any) -> None:
        index = int(_field(fragment, "index") or 0)
        call_id = _field(fragment, "id") or None
        function = _field(fragment, "function")
        name = (_field(function, "name") or "") if function is not None else ""
        arguments = (_field(function, "arguments") or "") if function is not None else ""
        current = self._latest_at.get(index)
        if current is None or (call_id is not None and call_id != current.id):
            if current is not None and current.id is None and not current.name:
                current.id = call_id  # an id arriving after an anonymous first fragment
            else:
                current = _PendingCall(call_id)
                self._calls.append(current)
                self._latest_at[index] = current
        if name and not current.name:
            current.name = name
        if arguments:
            current.arguments.append(arguments)

    def _complete_calls(self) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        for number, pending in enumerate(self._calls):
            arguments = parse_tool_arguments("".join(pending.arguments))
            if arguments is None or not pending.name:
                return None
            calls.append(ToolCall(pending.id or f"call_{number}", pending.name, arguments))
        return calls


def base_model_prompt(messages: list[dict[str, Any]], *, max_chars: int) -> str:
    """A plain transcript for a base model behind a completions endpoint.

    System text first, then the turns as ``Q:`` / ``A:`` lines, ending with ``A:`` for the
    model to continue (the bundled Gemma 3 270M base model answers a ``Q:``/``A:`` prompt
    far better than a ``User:``/``Assistant:`` one or its chat template). The oldest
    turns are dropped until the prompt fits in ``max_chars`` (the last turn is cut from
    its start if it alone is too long).
    """
    system = "\n\n".join(
        _content_text(m.get("content")) for m in messages if m.get("role") == "system"
    ).strip()
    turns = [_turn_line(m) for m in messages if m.get("role") != "system"]
    head = f"{system}\n\n" if system else ""
    tail = "A:"
    while len(turns) > 1 and len(head) + sum(len(t) + 1 for t in turns) + len(tail) > max_chars:
        turns.pop(0)
    body = "".join(f"{t}\n" for t in turns)
    prompt = f"{head}{body}{tail}"
    return prompt if len(prompt) <= max_chars else prompt[-max_chars:]


# A base model continues the transcript with the next "Q:" line unless stopped.
BASE_MODEL_STOP = ["\nQ:", "\nA:"]


def _turn_line(message: dict[str, Any]) -> str:
    role = message.get("role")
    label = {"user": "Q", "assistant": "A", "tool": "Tool result"}.get(str(role), "Q")
    return f"{label}: {_content_text(message.get('content')).strip()}"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
