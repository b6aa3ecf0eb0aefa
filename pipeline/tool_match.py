"""Tool preselection by meaning (docs/architecture.md §6): which of an instance's enabled
tools a message needs, each with the reason it was chosen.

Evidence, strongest first: an explicit mention (``@calculator``, "use the web search"),
the client's request, one of the tool's ``triggers`` (``skills.registry``: phrasings in
many languages that leave no doubt), then similarity to the tool's ``examples`` and
description — the cosine of the message's vector from the packaged local embedding model
(``openmates.embeddings``, all-MiniLM-L6-v2) to the nearest example's, at least
:data:`EMBEDDING_MIN_COSINE` and :data:`EMBEDDING_MARGIN` above the best other tool's,
or the character-trigram cosine (:func:`trigram_cosine`, script-independent) to the
nearest example at least :data:`TRIGRAM_MIN_COSINE`.

The examples' vectors are computed once per tool (:func:`warm_up` at start-up, or in a
background thread the first time a message needs them: until then similarity is by
trigrams alone, so a cold model never delays a turn); a message is embedded once (a
small LRU cache keeps the last vectors, so a message preselected twice costs one
embedding). With the embedding model missing, preselection keeps the other evidence.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from openmates.embeddings import LocalEmbeddingError, local_embed
from skills.registry import get_tool

logger = logging.getLogger(__name__)

# Set on the development split of tests/data/preprocess/tool_requests_dev.tsv
# (bench/preprocess_quality.py prints recall and precision for both splits).
EMBEDDING_MIN_COSINE = 0.5
EMBEDDING_MARGIN = 0.1
TRIGRAM_MIN_COSINE = 0.7
# Off: preselection by triggers and trigrams only (a switch for measuring).
USE_EMBEDDINGS = True
MESSAGE_CACHE_SIZE = 256
# The embedding sees at most this much of a message: requests are short, and the model's
# cost grows with the length.
EMBED_MAX_CHARS = 300


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """One preselected tool and why (``"mentioned"``, ``"requested"``, ``"rule: …"``,
    ``"similar to an example (0.71)"``, ``"offered: …"``)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ToolProfile:
    """What preselection compares a message with for one tool."""

    name: str
    triggers: tuple[re.Pattern[str], ...]
    texts: tuple[str, ...]  # the examples, then the description (and skill hint)
    trigrams: tuple[Counter[str], ...]
    trigram_norms: tuple[float, ...]


def trigrams(text: str) -> Counter[str]:
    """Character trigrams of ``text`` (lower case, runs of non-letters as one space, padded
    with spaces), counted."""
    folded = " " + " ".join(re.sub(r"[\W\d_]+", " ", text.lower()).split()) + " "
    return Counter(folded[i : i + 3] for i in range(len(folded) - 2))


def trigram_norm(grams: Counter[str]) -> float:
    """The Euclidean norm of a trigram count vector."""
    return math.sqrt(sum(c * c for c in grams.values()))


def trigram_cosine(
    a: Counter[str], b: Counter[str], norm_a: float | None = None, norm_b: float | None = None
) -> float:
    """Cosine of two trigram count vectors (0.0 when either is empty); their norms may
    be given when already known."""
    if not a or not b:
        return 0.0
    dot = sum(count * b[gram] for gram, count in a.items() if gram in b)
    norm_a = trigram_norm(a) if norm_a is None else norm_a
    norm_b = trigram_norm(b) if norm_b is None else norm_b
    return dot / (norm_a * norm_b)


_profiles: dict[tuple[str, str, str], ToolProfile] = {}
_profiles_lock = threading.Lock()


def tool_profile(name: str, description: str, hint: str = "") -> ToolProfile:
    """The (cached) profile of tool ``name``: the registry's triggers and examples, with
    ``description`` and the skill ``hint`` as one more text."""
    key = (name, description, hint)
    with _profiles_lock:
        profile = _profiles.get(key)
    if profile is not None:
        return profile
    spec = get_tool(name)
    examples = spec.examples if spec else ()
    texts = (*examples, f"{description} {hint}".strip())
    grams = tuple(trigrams(text) for text in examples)
    profile = ToolProfile(
        name=name,
        triggers=spec.triggers if spec else (),
        texts=texts,
        trigrams=grams,
        trigram_norms=tuple(trigram_norm(g) for g in grams),
    )
    with _profiles_lock:
        _profiles[key] = profile
    return profile


# --- embeddings ---------------------------------------------------------------------------


class _Vectors:
    """Unit vectors of texts by the local embedding model: the tools' texts kept, the
    messages' in an LRU of :data:`MESSAGE_CACHE_SIZE`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, Any] = {}
        self._messages: OrderedDict[str, Any] = OrderedDict()
        self._warming: threading.Thread | None = None
        self.available = True

    def _embed(self, texts: list[str]) -> list[Any] | None:
        import numpy as np

        if not self.available:
            return None
        try:
            vectors = local_embed(settings.LLM_EMBEDDING_MODEL, texts)
        except (LocalEmbeddingError, ImportError, OSError) as exc:
            logger.warning("tool preselection without embeddings: %s", exc)
            self.available = False
            return None
        return [np.asarray(v, dtype=np.float32) for v in vectors]

    def of_texts(self, texts: Sequence[str], *, wait: bool = True) -> Any | None:
        """A matrix (one row per text) of the tools' texts; None without the model, or,
        with ``wait=False``, while some are not embedded yet (they are embedded in a
        background thread meanwhile)."""
        import numpy as np

        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._texts]
        if missing and not wait:
            self._embed_later(missing)
            return None
        if missing:
            vectors = self._embed(missing)
            if vectors is None:
                return None
            with self._lock:
                self._texts.update(zip(missing, vectors, strict=True))
        with self._lock:
            return np.stack([self._texts[t] for t in texts])

    def _embed_later(self, texts: list[str]) -> None:
        with self._lock:
            if self._warming is not None and self._warming.is_alive():
                return
            self._warming = threading.Thread(
                target=self.of_texts, args=(texts,), name="tool-vectors", daemon=True
            )
            self._warming.start()

    def of_message(self, text: str) -> Any | None:
        """The vector of a message (first :data:`EMBED_MAX_CHARS` characters)."""
        key = text[:EMBED_MAX_CHARS]
        with self._lock:
            vector = self._messages.get(key)
            if vector is not None:
                self._messages.move_to_end(key)
                return vector
        vectors = self._embed([key])
        if vectors is None:
            return None
        with self._lock:
            self._messages[key] = vectors[0]
            while len(self._messages) > MESSAGE_CACHE_SIZE:
                self._messages.popitem(last=False)
        return vectors[0]


_vectors = _Vectors()


def message_vector(text: str) -> Any | None:
    """The local model's unit vector of ``text`` (cached), or None without the model."""
    return _vectors.of_message(text)


def warm_up(profiles: Iterable[ToolProfile] = ()) -> None:
    """Load the embedding model and embed the registered tools' examples now (about a
    second) instead of on the first message."""
    from skills.registry import all_tools

    chosen = list(profiles) or [tool_profile(t.name, t.description) for t in all_tools()]
    for profile in chosen:
        _vectors.of_texts(profile.texts)
    _vectors.of_message("warm up")


def _embedding_scores(text: str, profiles: Sequence[ToolProfile]) -> dict[str, float]:
    # The tools' vectors are never made inside a turn (seconds on a loaded machine): until
    # :func:`warm_up` or the background embedding has made them, the other evidence decides.
    matrices = []
    for profile in profiles:
        matrix = _vectors.of_texts(profile.texts, wait=False)
        if matrix is None:
            return {}
        matrices.append(matrix)
    vector = message_vector(text)
    if vector is None:
        return {}
    return {
        profile.name: float((matrix @ vector).max())
        for profile, matrix in zip(profiles, matrices, strict=True)
    }


# --- the choice -----------------------------------------------------------------------------


def _trigger_reason(text: str, profile: ToolProfile) -> str | None:
    for trigger in profile.triggers:
        match = trigger.search(text)
        if match:
            # Widened to whole words and numbers: a pattern ends at the first digit it
            # needs ("7 * 2" of "17 * 23").
            start, end = match.span()
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in ".,"):
                start -= 1
            while end < len(text) and (
                text[end].isalnum() or (text[end] in ".," and text[end + 1 : end + 2].isdigit())
            ):
                end += 1
            return f"rule: {' '.join(text[start:end].split())[:40]!r}"
    return None


def _similarity_reason(
    text: str, profile: ToolProfile, embedded: dict[str, float], grams: Counter[str]
) -> str | None:
    cosine = embedded.get(profile.name)
    if cosine is not None and cosine >= EMBEDDING_MIN_COSINE:
        others = [score for name, score in embedded.items() if name != profile.name]
        if not others or cosine - max(others) >= EMBEDDING_MARGIN:
            return f"similar to an example ({cosine:.2f})"
    norm = trigram_norm(grams)
    best = max(
        (
            trigram_cosine(grams, example, norm, example_norm)
            for example, example_norm in zip(profile.trigrams, profile.trigram_norms, strict=True)
        ),
        default=0.0,
    )
    if best >= TRIGRAM_MIN_COSINE:
        return f"worded like an example ({best:.2f})"
    return None


def _mostly_latin(text: str) -> bool:
    # The packaged model is English (all-MiniLM-L6-v2): on other scripts its neighbours
    # are noise, and the trigrams and triggers carry those messages.
    letters = [ch for ch in text if ch.isalpha()]
    return bool(letters) and sum(ch < "\u0250" for ch in letters) * 10 >= len(letters) * 9


def tools_by_meaning(
    text: str,
    profiles: Sequence[ToolProfile],
    *,
    chosen: Iterable[str] = (),
    embed: bool = True,
) -> list[ToolChoice]:
    """The tools among ``profiles`` the message needs by triggers or similarity, in
    ``profiles`` order, skipping names in ``chosen`` (already decided). ``embed=False``
    leaves the embedding out (the caller knows the message is not English)."""
    skip = set(chosen)
    choices: list[ToolChoice] = []
    pending: list[ToolProfile] = []
    for profile in profiles:
        if profile.name in skip:
            continue
        reason = _trigger_reason(text, profile)
        if reason:
            choices.append(ToolChoice(profile.name, reason))
        else:
            pending.append(profile)
    if pending and not choices and _mostly_latin(text):
        # Similarity only decides when no rule did: a message rarely needs two tools,
        # and skipping the embedding keeps rule-matched messages at a fraction of a ms.
        embedded = _embedding_scores(text, profiles) if embed and USE_EMBEDDINGS else {}
        grams = trigrams(text)
        for profile in pending:
            reason = _similarity_reason(text, profile, embedded, grams)
            if reason:
                choices.append(ToolChoice(profile.name, reason))
    return choices
