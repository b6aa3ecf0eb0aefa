"""Pre-processing started before a follow-up's accept call returns (docs/architecture.md §7).

A follow-up's pre-processing needs the chat's instance and the user's role in it, which
the accept call reads from PostgreSQL, and the chat's newest history entries, its notes
and the message's vectors, which the early reads fetch beside that call
(``pipeline.turn.early_reads_start``). The instance and role the chat's last turn was
accepted with in this process (:func:`guess_keep`) are what the next one will most
likely be accepted with: from them, pre-processing runs as soon as the early reads are
in, while the accept call may still be in the database.

The turn uses that result only when every input it would pass to
``preprocess.preprocess`` is the same (:class:`PreprocessInputs` compares them all: the
role, the instance settings pre-processing reads, the enabled tools and mates, the
previous answer on the question's branch, the chat's language, the client's overrides);
otherwise (a role changed meanwhile, an instance edited, an older branch continued) it
runs pre-processing again, so a wrong guess costs time, not a different decision (only
while the local embedding model loads at start-up can moments earlier decide otherwise).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from instances.models import Instance
from pipeline import preprocess as pre

# Chats whose last accepted turn this process remembers (a few hundred bytes each).
GUESSES_KEPT = 4096


@dataclass(frozen=True)
class Guess:
    """The instance a chat belongs to and the user's role in it, as the chat's last turn
    in this process was accepted with."""

    instance: Instance
    role: str


_guesses: OrderedDict[tuple[int, str], Guess] = OrderedDict()
_guesses_lock = threading.Lock()


def guess_keep(*, user_id: int, chat_id: str, instance: Instance, role: str) -> None:
    """Remember what the accept call found for ``user_id``'s turn in ``chat_id`` (the
    newest :data:`GUESSES_KEPT` chats are kept)."""
    with _guesses_lock:
        _guesses[(user_id, chat_id)] = Guess(instance=instance, role=role)
        _guesses.move_to_end((user_id, chat_id))
        while len(_guesses) > GUESSES_KEPT:
            _guesses.popitem(last=False)


def guess_for(*, user_id: int, chat_id: str) -> Guess | None:
    """What :func:`guess_keep` remembered for ``user_id`` in ``chat_id``, or None (the
    chat's first turn in this process, or one from a chat id the user never had accepted:
    nothing of another user's is ever returned)."""
    with _guesses_lock:
        return _guesses.get((user_id, chat_id))


def guesses_forget() -> None:
    """Forget every guess (tests)."""
    with _guesses_lock:
        _guesses.clear()


@dataclass(frozen=True)
class PreprocessInputs:
    """Every input of ``preprocess.preprocess`` for one message, compared by value.

    ``default_language``, ``tools_offer_all_up_to`` and ``tier_map`` are the instance's
    settings pre-processing reads (the instance object itself may be another copy of the
    same row); ``candidates`` and ``mate_categories`` come from the instance's context.
    """

    content: str
    default_language: str
    tools_offer_all_up_to: int
    tier_map: Any
    candidates: tuple[pre.ToolCandidate, ...]
    mate_categories: tuple[str, ...]
    role: str
    previous_assistant: str | None
    requested_tier: str | None
    requested_tools: tuple[str, ...] | None
    fallback_language: str | None

    @classmethod
    def of(
        cls,
        *,
        content: str,
        instance: Instance,
        candidates: Sequence[pre.ToolCandidate],
        mate_categories: Sequence[str],
        role: str,
        previous_assistant: str | None,
        requested_tier: str | None,
        requested_tools: Sequence[str] | None,
        fallback_language: str | None,
    ) -> PreprocessInputs:
        """The inputs of one message as a turn has them."""
        return cls(
            content=content,
            default_language=instance.default_language,
            tools_offer_all_up_to=instance.tools_offer_all_up_to,
            tier_map=instance.tier_map,
            candidates=tuple(candidates),
            mate_categories=tuple(mate_categories),
            role=role,
            previous_assistant=previous_assistant,
            requested_tier=requested_tier,
            requested_tools=tuple(requested_tools) if requested_tools is not None else None,
            fallback_language=fallback_language,
        )

    def run(self, instance: Instance) -> pre.Preprocessed:
        """``preprocess.preprocess`` on these inputs (``instance``: a copy of the row the
        settings were read from)."""
        return pre.preprocess(
            content=self.content,
            instance=instance,
            candidates=self.candidates,
            role=self.role,
            previous_assistant=self.previous_assistant,
            mate_categories=self.mate_categories,
            requested_tier=self.requested_tier,
            requested_tools=self.requested_tools,
            fallback_language=self.fallback_language,
        )


@dataclass(frozen=True)
class Speculation:
    """Pre-processing's decision (``decided``) on guessed ``inputs``."""

    inputs: PreprocessInputs
    decided: pre.Preprocessed


def previous_answer(messages: Sequence[dict[str, Any]] | None) -> str | None:
    """The newest assistant message's text among ``messages`` (oldest first), or None."""
    previous = next((m for m in reversed(messages or ()) if m.get("role") == "assistant"), None)
    return str(previous["content"]) if previous else None


def preprocessed(
    inputs: PreprocessInputs, instance: Instance, speculation: Speculation | None
) -> pre.Preprocessed:
    """The decision for ``inputs``: ``speculation``'s when it was made from equal inputs,
    else ``preprocess.preprocess`` run now."""
    if speculation is not None and speculation.inputs == inputs:
        return speculation.decided
    return inputs.run(instance)
