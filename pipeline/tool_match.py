"""Tool preselection by meaning (docs/architecture.md §6): which of an instance's enabled
tools a message needs, each with the reason it was chosen.

Evidence, strongest first: an explicit mention (``@calculator``, "use the web search"),
the client's request, one of the tool's ``triggers`` (``skills.registry``: phrasings in
many languages that leave no doubt), then similarity by meaning: the message's vector
from the packaged multilingual embedding model (``settings.PREPROCESS_EMBEDDING_MODEL``,
USE multilingual v3 from ``openmates.embeddings``) against the tools' ``examples`` and
descriptions and against a "no tool" class (:data:`NO_TOOL_EXAMPLES` and every tool's
``counter_examples``) — a nearest-neighbour intent classifier with an out-of-scope class.
A tool is chosen when its nearest example's cosine is at least
:data:`EMBEDDING_MIN_COSINE` and :data:`EMBEDDING_MARGIN` above both the best other
tool's (every registered tool competes, enabled or not) and the no-tool class's, and the
tool's one-vs-rest logistic regression over the same vectors (its examples against all
other texts; :func:`pipeline.injection_model.logistic_fit`) gives the message at least
:data:`CLASSIFIER_MIN_PROBABILITY`: the nearest neighbour is swayed by a shared name ("…
in Krakow"), the regression by the words that decide.
Similarity decides alone when no trigger fired; beside a trigger's tool, another tool by
meaning also needs its regression at least :data:`BESIDE_RULE_PROBABILITY` sure ("what
time does the final kick off?" is the clock's words and a search's need). A clause gets
the tools of :data:`CLAUSE_RULES_ONLY` (the memory save) by their triggers only: a fact
stated beside another request is context for it.
Without the model's vectors (while it loads, or without the package), the
character-trigram cosine (:func:`trigram_cosine`, script-independent) to the nearest
example, at least :data:`TRIGRAM_MIN_COSINE`, stands in.

The examples' vectors and the regressions are computed once (:func:`warm_up` at
start-up, or in a background thread the first time a message needs them: until then
similarity is by trigrams alone, and by the nearest example alone, so a cold model never
delays a turn); a message is embedded once (a small LRU cache keeps
the last vectors, so a message preselected twice costs one embedding). Per set of enabled
tools the rows, their matrix and the regressions' stacked weights are kept
(:class:`_Layout`): a message costs two matrix products and one reduction, and one
beside a trigger's tool only the regressions' small product unless one of them is sure.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from openmates.embeddings import LocalEmbeddingError, local_embed
from pipeline.injection_model import logistic_fit
from pipeline.numbers import numbers_as_digits
from skills.registry import all_tools, get_tool

logger = logging.getLogger(__name__)

# Set on the development split of tests/data/preprocess/tool_requests_dev.tsv
# (bench/preprocess_quality.py prints recall and precision for every split).
EMBEDDING_MIN_COSINE = 0.35
EMBEDDING_MARGIN = 0.0
# The languages USE multilingual v3 was trained on (Yang et al. 2019, "Multilingual
# Universal Sentence Encoder for Semantic Retrieval": 16 languages, Chinese twice). In
# others (Greek, Hindi, Czech, Danish, Vietnamese, Finnish, …) it places a message near
# whatever shares its script and words, so a nearest example of any tool sits at 0.7-0.9
# and a few hundredths above the no-tool class by chance: there similarity needs
# :data:`UNTRAINED_MARGIN` over the runner-up, and the triggers carry those languages.
# Set on the dev split (similarity's choices in such languages: at 0.04, 12 of 21 wrong
# ones fall, 5 of 14 right ones).
EMBEDDING_LANGUAGES = frozenset(
    {"ar", "zh", "nl", "en", "fr", "de", "it", "ja", "ko", "pl", "pt", "es", "th", "tr", "ru"}
)
UNTRAINED_MARGIN = 0.04
# A tool the nearest example chose must also be at least this likely to the tool's
# one-vs-rest logistic regression over the same vectors (its examples against every other
# tool's and the no-tool class): the nearest neighbour follows names ("… in Krakow"), the
# regression the words that decide. Low on purpose: a veto, not a second classifier.
CLASSIFIER_MIN_PROBABILITY = 0.1
CLASSIFIER_PENALTY = 1.0
# Another tool's regression at least this likely (and likelier than the nearest example's
# tool) takes its place.
SWAP_MIN_PROBABILITY = 0.4
TRIGRAM_MIN_COSINE = 0.7
# Off: preselection by triggers and trigrams only (a switch for measuring).
USE_EMBEDDINGS = True
MESSAGE_CACHE_SIZE = 256
STACK_CACHE_SIZE = 64
MODEL_CACHE_SIZE = 8
# The embedding sees at most this much of a message: requests are short, and the model's
# cost grows with the length.
EMBED_MAX_CHARS = 300

# Requests that need no tool, in the languages the model knows best (and more, one a line,
# in pipeline/no_tool_requests.txt): with the tools'
# ``counter_examples`` they are the "no tool" class a message must be further from than
# from a tool's examples (chat, writing, explaining, coding, advice, opinions).
NO_TOOL_EXAMPLES = (
    "Hi! How's it going?",
    "Thanks a lot, that was helpful",
    "Write a short poem about the sea",
    "Explain how vaccines work",
    "Can you help me word an apology to a friend?",
    "What's the difference between a virus and a bacterium?",
    "Give me three ideas for a team-building event",
    "Summarise the main points of this article",
    "Fix the bug in this Python loop",
    "What do you think about remote work?",
    "Tell me a fun fact about octopuses",
    "How do I start learning the guitar?",
    "Recommend a novel for a long train ride",
    "Hallo, na, alles klar bei dir?",
    "Schreib mir eine Geburtstagskarte für meine Oma",
    "Erklär mir den Unterschied zwischen Wetter und Klima",
    "Wie formuliere ich eine höfliche Absage?",
    "Salut, ça va ?",
    "Écris-moi une histoire courte pour enfants",
    "Explique-moi le fonctionnement d'une batterie",
    "Hola, ¿qué tal estás?",
    "Escríbeme un mensaje de agradecimiento para mi jefa",
    "¿Por qué los gatos ronronean?",
    "Ciao, come va?",
    "Scrivimi una poesia sull'estate",
    "Perché il cielo è azzurro?",
    "Привет, как дела?",
    "Напиши короткое поздравление с новосельем",  # noqa: RUF001 (Cyrillic)
    "Почему листья желтеют осенью?",
    "やあ、調子はどう？",  # noqa: RUF001 (Japanese punctuation)
    "猫についての短い詩を書いて",
    "日本の歴史について教えて",
    "Oi, tudo bem?",
    "Escreva um e-mail de desculpas para um cliente",
    "Hoi, hoe gaat het?",
    "Schrijf een kort verhaal over een draak",
    "Cześć, co słychać?",
    "Napisz zaproszenie na urodziny",
    "你好，最近怎么样？",  # noqa: RUF001 (Chinese punctuation)
    "帮我写一封求职信",
    "What's the best time of day to go for a run?",
    "How do I explain fractions to my eight-year-old?",
    "Give me a recipe for pancakes with 200 g of flour",
    "Translate 'see you tomorrow' into Spanish",
    "How does compound interest work, in simple words?",
    "What should I pack for a trip to Norway?",
    "Is it healthy to drink coffee every day?",
    "Write an Excel formula that adds up column B",
    "What happened in the French Revolution?",
    "Wie erkläre ich meinem Kind das Einmaleins?",
    "Was ist die beste Tageszeit zum Lernen?",
    "Welche Sehenswürdigkeiten gibt es in Dresden?",
    "Comment on calcule une moyenne pondérée, en général ?",
    "Donne-moi une recette de crêpes",
    "Qu'est-ce que je peux visiter en Provence ?",
    "¿Cómo se calcula el área de un círculo?",
    "Dame una receta de tortilla de patatas",
    "¿Qué es mejor, alquilar o comprar una casa?",
    "Come si dice 'buongiorno' in tedesco?",
    "Dammi una ricetta per il tiramisù",
    "Как объяснить ребёнку, что такое проценты?",
    "Дай рецепт борща",
    "Что посмотреть в Праге?",
    "英語で「おはよう」は何て言う？",  # noqa: RUF001 (Japanese punctuation)
    "おすすめのレシピを教えて",
    "Como se calcula juros compostos?",
    "Hoe maak ik pannenkoeken?",
    "Jak nauczyć się programować?",
    "怎么向孩子解释分数？",  # noqa: RUF001 (Chinese punctuation)
    *(
        line.strip()
        for line in (Path(__file__).with_name("no_tool_requests.txt"))
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip() and not line.startswith("#")
    ),
)


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
    counter_texts: tuple[str, ...]  # near misses that need no tool
    trigrams: tuple[Counter[str], ...]
    trigram_norms: tuple[float, ...]
    # ``trigrams`` inverted (:func:`trigram_postings`), for :func:`best_trigram_cosine`.
    trigram_index: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)


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


def trigram_postings(vectors: Sequence[Counter[str]]) -> dict[str, tuple[tuple[int, int], ...]]:
    """``vectors`` (trigram counts) as an inverted index: trigram → ``((index, count), …)``
    of the vectors holding it."""
    postings: dict[str, list[tuple[int, int]]] = {}
    for index, grams in enumerate(vectors):
        for gram, count in grams.items():
            postings.setdefault(gram, []).append((index, count))
    return {gram: tuple(entries) for gram, entries in postings.items()}


def best_trigram_cosine(
    grams: Counter[str],
    index: dict[str, tuple[tuple[int, int], ...]],
    norms: Sequence[float],
    norm: float | None = None,
) -> float:
    """The largest :func:`trigram_cosine` of ``grams`` with the vectors of ``index``
    (:func:`trigram_postings`, their norms ``norms``), 0.0 when none shares a trigram.

    Only the vectors sharing a trigram with ``grams`` are visited (the dot products summed
    along the message's trigrams' postings), not every vector with every trigram.
    """
    norm = trigram_norm(grams) if norm is None else norm
    if not norm:
        return 0.0
    dots: dict[int, int] = {}
    for gram, count in grams.items():
        for position, other in index.get(gram, ()):
            dots[position] = dots.get(position, 0) + count * other
    return max((dot / (norm * norms[position]) for position, dot in dots.items()), default=0.0)


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
        counter_texts=spec.counter_examples if spec else (),
        trigrams=grams,
        trigram_norms=tuple(trigram_norm(g) for g in grams),
        trigram_index=trigram_postings(grams),
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
        # Stacked matrices by their texts: an instance's tools ask for the same one on
        # every message.
        self._stacks: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._warming: threading.Thread | None = None
        # Per stack of texts, the tools' logistic regressions (name -> weights, bias last).
        self._models: dict[frozenset[tuple[str, str]], dict[str, Any]] = {}
        self._by_texts: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, Any]] = {}
        self._training: threading.Thread | None = None
        # The rows of each set of enabled tools (:func:`_layout`), with their matrix and
        # regressions once made: found by the profiles' identities on every message.
        self.layouts: dict[tuple[tuple[int, ...], tuple[str, ...]], _Layout] = {}
        self.lock = self._lock
        self.available = True

    def _embed(self, texts: list[str]) -> list[Any] | None:
        import numpy as np

        if not self.available:
            return None
        try:
            vectors = local_embed(settings.PREPROCESS_EMBEDDING_MODEL, texts)
        except (LocalEmbeddingError, ImportError, OSError) as exc:
            logger.warning("tool preselection without embeddings: %s", exc)
            self.available = False
            return None
        except Exception:
            # Similarity is one piece of evidence: a text the model chokes on keeps the rest.
            logger.exception("tool preselection could not embed %d texts", len(texts))
            return None
        return [np.asarray(v, dtype=np.float32) for v in vectors]

    def of_texts(self, texts: Sequence[str], *, wait: bool = True) -> Any | None:
        """A matrix (one row per text) of the tools' texts; None without the model, or,
        with ``wait=False``, while some are not embedded yet (they are embedded in a
        background thread meanwhile)."""
        import numpy as np

        key = tuple(texts)
        with self._lock:
            stacked = self._stacks.get(key)
            if stacked is not None:
                self._stacks.move_to_end(key)
                return stacked
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
            stacked = np.stack([self._texts[t] for t in texts])
            self._stacks[key] = stacked
            while len(self._stacks) > STACK_CACHE_SIZE:
                self._stacks.popitem(last=False)
            return stacked

    def _embed_later(self, texts: list[str]) -> None:
        with self._lock:
            if self._warming is not None and self._warming.is_alive():
                return
            self._warming = threading.Thread(
                target=self.of_texts, args=(texts,), name="tool-vectors", daemon=True
            )
            self._warming.start()

    def models(
        self, texts: tuple[str, ...], labels: tuple[str, ...], matrix: Any, *, wait: bool
    ) -> dict[str, Any] | None:
        """The one-vs-rest logistic regressions (tool name -> weights, bias last) over the
        rows of ``matrix`` (the vectors of ``texts``, each labelled with its tool's name or
        "" for the no-tool class); None while they are trained in a background thread
        (``wait=False``)."""
        with self._lock:
            # Asked with the same texts on every message: found by them first (a tuple of
            # strings hashes from their cached hashes).
            found = self._by_texts.get((texts, labels))
            if found is not None:
                return found
        # The same labelled texts in another order (another instance's enabled tools
        # first) share one model.
        key = frozenset(zip(labels, texts, strict=True))
        with self._lock:
            found = self._models.get(key)
            if found is not None:
                self._by_texts[(texts, labels)] = found
                while len(self._by_texts) > MODEL_CACHE_SIZE:
                    self._by_texts.pop(next(iter(self._by_texts)))
                return found
            if not wait and self._training_alive():
                return None
            if not wait:
                self._training = threading.Thread(
                    target=self._train,
                    args=(key, labels, matrix),
                    name="tool-models",
                    daemon=True,
                )
                self._training.start()
                return None
        return self._train(key, labels, matrix)

    def _training_alive(self) -> bool:
        return self._training is not None and self._training.is_alive()

    def _train(
        self, key: frozenset[tuple[str, str]], labels: tuple[str, ...], matrix: Any
    ) -> dict[str, Any]:
        import numpy as np

        features = np.asarray(matrix, dtype=np.float64)
        fitted = {
            name: logistic_fit(
                features,
                np.array([label == name for label in labels], dtype=np.float64),
                penalty=CLASSIFIER_PENALTY,
            )
            for name in dict.fromkeys(label for label in labels if label)
        }
        models: dict[str, Any] = dict(fitted)
        if fitted:
            # Every tool's weights as one (d + 1, tools) matrix: a message's probabilities
            # are one product, not one per tool.
            models[_STACKED] = (tuple(fitted), np.stack(list(fitted.values()), axis=1))
        with self._lock:
            self._models[key] = models
            while len(self._models) > MODEL_CACHE_SIZE:
                self._models.pop(next(iter(self._models)))
        return models

    def of_message(self, text: str) -> Any | None:
        """The vector of a message (first :data:`EMBED_MAX_CHARS` characters)."""
        return self.of_messages([text])[0]

    def of_messages(self, texts: Sequence[str]) -> list[Any | None]:
        """The vectors of messages (each cut to :data:`EMBED_MAX_CHARS` characters), the
        missing ones embedded in one batch; Nones without the model."""
        keys = [text[:EMBED_MAX_CHARS] for text in texts]
        with self._lock:
            found = {k: self._messages[k] for k in keys if k in self._messages}
            for key in found:
                self._messages.move_to_end(key)
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            vectors = self._embed(missing)
            if vectors is None:
                return [None] * len(keys)
            found.update(zip(missing, vectors, strict=True))
            with self._lock:
                self._messages.update(zip(missing, vectors, strict=True))
                while len(self._messages) > MESSAGE_CACHE_SIZE:
                    self._messages.popitem(last=False)
        return [found[k] for k in keys]


_vectors = _Vectors()


def message_vector(text: str) -> Any | None:
    """The local model's unit vector of ``text`` (cached), or None without the model."""
    return _vectors.of_message(text)


def vectors_prefetch(text: str) -> None:
    """Embed ``text`` and its :func:`clauses` that :func:`tools_by_meaning` would embed
    (into the message cache), in one batch. Blocking; no-op without the model."""
    parts = clauses(text)
    wanted = [text, *(p for p in parts if len(parts) > 1 and _clause_words(p) >= CLAUSE_MIN_WORDS)]
    _vectors.of_messages(wanted)


def _no_tool_texts(profiles: Sequence[ToolProfile]) -> tuple[str, ...]:
    return (*NO_TOOL_EXAMPLES, *(text for p in profiles for text in p.counter_texts))


def warm_up(profiles: Iterable[ToolProfile] = ()) -> None:
    """Load the embedding model and embed the registered tools' examples and the no-tool
    class now (about a second) instead of on the first message."""
    chosen = list(profiles) or [tool_profile(t.name, t.description) for t in all_tools()]
    no_tool = _no_tool_texts(chosen)
    texts = (*(t for p in chosen for t in p.texts), *no_tool)
    matrix = _vectors.of_texts(texts)
    if matrix is not None:
        labels = (*(p.name for p in chosen for _ in p.texts), *("" for _ in no_tool))
        _vectors.models(texts, labels, matrix, wait=True)
    _vectors.of_message("warm up")


@dataclass(frozen=True, slots=True)
class Similarity:
    """Cosines of one message: to each tool's nearest example (``tools``: name → cosine)
    and to the nearest no-tool example (``no_tool``; -1.0 when there is none); and each
    tool's probability by its logistic regression (``likely``: name → 0-1; empty while
    the regressions are trained)."""

    tools: dict[str, float]
    no_tool: float
    likely: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Layout:
    """The rows one set of enabled tools' profiles is compared with (every registered
    tool's texts, then the no-tool class's), made once per set: ``starts`` (where each of
    ``names``' rows begin), ``tool_rows`` (how many rows are tools'), and, once made, the
    (rows, 512) ``matrix`` of their unit vectors and the tools' regressions."""

    given: tuple[ToolProfile, ...]
    names: tuple[str, ...]
    texts: tuple[str, ...]
    labels: tuple[str, ...]
    starts: Any
    tool_rows: int
    matrix: Any = None
    models: dict[str, Any] | None = None


def _layout(profiles: Sequence[ToolProfile]) -> _Layout:
    """The (cached, per :data:`_vectors`) :class:`_Layout` of ``profiles`` with every
    other registered tool after them."""
    import numpy as np

    registered = tuple(t.name for t in all_tools())
    key = (tuple(id(p) for p in profiles), registered)
    found = _vectors.layouts.get(key)
    if found is not None and all(a is b for a, b in zip(found.given, profiles, strict=True)):
        return found
    names = {p.name for p in profiles}
    every = [
        *profiles,
        *(tool_profile(t.name, t.description) for t in all_tools() if t.name not in names),
    ]
    no_tool = _no_tool_texts(every)
    tool_texts = tuple(t for p in every for t in p.texts)
    made = _Layout(
        given=tuple(profiles),
        names=tuple(p.name for p in every),
        texts=(*tool_texts, *no_tool),
        labels=(*(p.name for p in every for _ in p.texts), *("" for _ in no_tool)),
        starts=np.cumsum([0, *(len(p.texts) for p in every[:-1])]),
        tool_rows=len(tool_texts),
    )
    with _vectors.lock:
        _vectors.layouts[key] = made
        while len(_vectors.layouts) > STACK_CACHE_SIZE:
            _vectors.layouts.pop(next(iter(_vectors.layouts)))
    return made


def _embedding_scores(text: str, profiles: Sequence[ToolProfile]) -> Similarity | None:
    # The tools' vectors are never made inside a turn (seconds on a loaded machine): until
    # :func:`warm_up` or the background embedding has made them, the other evidence decides.
    # Every registered tool competes, enabled or not: a weather question must not fall to
    # the clock because the instance has no weather tool.
    import numpy as np

    layout = _layout(profiles)
    if layout.matrix is None:
        layout.matrix = _vectors.of_texts(layout.texts, wait=False)
        if layout.matrix is None:
            return None
    vector = message_vector(text)
    if vector is None:
        return None
    cosines = layout.matrix @ vector
    # Each tool's nearest example: one reduction over the tools' rows, not a slice each.
    nearest = np.maximum.reduceat(cosines[: layout.tool_rows], layout.starts)
    tools = dict(zip(layout.names, nearest.tolist(), strict=True))
    no_tool = cosines[layout.tool_rows :]
    if layout.models is None:
        layout.models = _vectors.models(layout.texts, layout.labels, layout.matrix, wait=False)
    return Similarity(
        tools,
        float(no_tool.max()) if len(no_tool) else -1.0,
        _probabilities(layout.models, vector),
    )


def _regression_scores(text: str, profiles: Sequence[ToolProfile]) -> dict[str, float]:
    """Each registered tool's probability (0-1) by its regression for ``text``, without
    the cosines to every example when the regressions are made; empty without the
    model's vectors."""
    layout = _layout(profiles)
    if layout.matrix is None or layout.models is None:
        embedded = _embedding_scores(text, profiles)
        return embedded.likely if embedded is not None else {}
    vector = message_vector(text)
    return _probabilities(layout.models, vector) if vector is not None else {}


# The key of :meth:`_Vectors.models`' stacked weights (no tool is called "").
_STACKED = ""


def _probabilities(models: dict[str, Any] | None, vector: Any) -> dict[str, float]:
    """Each tool's probability (0-1) by its regression for the unit ``vector`` (512
    floats), from the stacked (d + 1, tools) weights in one product; empty without
    regressions."""
    import numpy as np

    if not models or _STACKED not in models:
        return {}
    names, weights = models[_STACKED]
    scores = vector @ weights[:-1] + weights[-1]
    probabilities = 1.0 / (1.0 + np.exp(-np.clip(scores, -60.0, 60.0)))
    return dict(zip(names, probabilities.tolist(), strict=True))


def tool_probabilities(text: str) -> dict[str, float] | None:
    """Each registered tool's probability (0-1) for ``text`` by its logistic regression;
    None without the model's vectors or while the regressions are trained."""
    embedded = _embedding_scores(text, [])
    return embedded.likely if embedded is not None and embedded.likely else None


# --- the choice -----------------------------------------------------------------------------


_NUMBER_RE = re.compile(r"\d+")


def _trigger_reason(text: str, profile: ToolProfile, *, numbers: int = 0) -> str | None:
    """The reason of the first of ``profile``'s triggers that matches ``text`` (its span
    holding at least ``numbers`` numbers), or None."""
    for trigger in profile.triggers:
        match = trigger.search(text)
        if match and len(_NUMBER_RE.findall(match.group(0))) >= numbers:
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
    profile: ToolProfile,
    embedded: Similarity | None,
    grams: Counter[str],
    *,
    floor: float | None = None,
    margin: float = EMBEDDING_MARGIN,
) -> str | None:
    if embedded is not None:
        # A clause (``floor`` given) is a fragment: its nearest example is often a near
        # miss, so the regression must be surer of it than of a whole message.
        needed = CLASSIFIER_MIN_PROBABILITY if floor is None else CLAUSE_MIN_PROBABILITY
        floor = EMBEDDING_MIN_COSINE if floor is None else floor
        cosine = embedded.tools[profile.name]
        rival = max(
            [score for name, score in embedded.tools.items() if name != profile.name],
            default=-1.0,
        )
        likely = embedded.likely.get(profile.name, 1.0)
        if cosine >= floor and cosine - max(rival, embedded.no_tool) >= margin and likely >= needed:
            return f"similar to an example ({cosine:.2f}; no tool {embedded.no_tool:.2f})"
        return None
    best = best_trigram_cosine(grams, profile.trigram_index, profile.trigram_norms)
    if best >= TRIGRAM_MIN_COSINE:
        return f"worded like an example ({best:.2f})"
    return None


# Where a message asking for two things splits: sentence ends and the words for "and"
# ("what time is it in Dakar and is it hot there?").
_CLAUSE_SPLIT_RE = re.compile(
    r"[.?!;\n\u3002\uff1f\uff01\uff1b]+\s*|\uff0c|\u3001"
    r"|\s(?:and|also|plus|und|sowie|et|puis|y|también|e|anche|poi|и|\u0430 также|ещё|en|i"
    r"|oraz|ja)\s"
    r"|そして|それと|それから|还有|并且|然后",
    re.IGNORECASE,
)
# A clause of fewer words (two CJK characters count as one) is no request of its own.
MIN_CLAUSE_WORDS = 2
# A clause is compared by meaning from this many words on, and needs a closer example
# than a whole message: a fragment's nearest example is often a near miss.
CLAUSE_MIN_WORDS = 3
CLAUSE_MIN_COSINE = 0.4
CLAUSE_MIN_PROBABILITY = 0.15
# Tools a clause gets by their rules only, never by meaning: a clause stating a fact
# beside another request ("my daughter is 7, which book suits her?") is context for that
# request, and a save asked for in a clause says so in words the rules know ("remember").
CLAUSE_RULES_ONLY = frozenset({"memory_save"})
# A tool beside one a rule chose needs its regression at least this sure (and to be the
# nearest example, as any tool by meaning).
BESIDE_RULE_PROBABILITY = 0.5


def clauses(text: str) -> list[str]:
    """The parts of ``text`` that may each ask for something (at least
    :data:`MIN_CLAUSE_WORDS` words); ``[text]`` when it does not split."""
    parts = [" ".join(p.split()) for p in _CLAUSE_SPLIT_RE.split(text)]
    found = [p for p in parts if _clause_words(p) >= MIN_CLAUSE_WORDS]
    return found if len(found) > 1 else [text]


def tools_by_meaning(
    text: str,
    profiles: Sequence[ToolProfile],
    *,
    chosen: Iterable[str] = (),
    embed: bool = True,
    language: str = "",
) -> list[ToolChoice]:
    """The tools among ``profiles`` the message needs by triggers or similarity, skipping
    names in ``chosen`` (already decided): those of the whole message, then those of each
    of its :func:`clauses` (a message may ask for two things; a clause by meaning only
    from :data:`CLAUSE_MIN_WORDS` words and :data:`CLAUSE_MIN_COSINE`). ``embed=False``
    leaves the embedding out; ``language`` (an ISO 639-1 code, "" unknown) outside
    :data:`EMBEDDING_LANGUAGES` asks similarity for :data:`UNTRAINED_MARGIN`."""
    skip = set(chosen)
    margin = (
        UNTRAINED_MARGIN if language and language not in EMBEDDING_LANGUAGES else EMBEDDING_MARGIN
    )
    choices = _by_meaning(text, profiles, skip, embed, margin=margin)
    parts = clauses(text)
    if len(parts) > 1:
        for part in parts:
            found = _by_meaning(
                part,
                profiles,
                skip | {c.name for c in choices},
                embed and _clause_words(part) >= CLAUSE_MIN_WORDS,
                floor=CLAUSE_MIN_COSINE,
                margin=margin,
            )
            choices.extend(ToolChoice(c.name, f"{c.reason} in {part[:40]!r}") for c in found)
    return choices


def _clause_words(text: str) -> int:
    # A CJK character carries about half a word's meaning.
    cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return len(text.split()) + cjk // 2


def _by_meaning(
    text: str,
    profiles: Sequence[ToolProfile],
    skip: set[str],
    embed: bool,
    *,
    floor: float | None = None,
    margin: float = EMBEDDING_MARGIN,
) -> list[ToolChoice]:
    choices: list[ToolChoice] = []
    pending: list[ToolProfile] = []
    # The rules also read number words as digits ("seventeen times three").
    numbered = numbers_as_digits(text)
    for profile in profiles:
        if profile.name in skip:
            continue
        reason = _trigger_reason(text, profile)
        if not reason and numbered is not text:
            # Two quantities: a number word alone is no sum ("divide the kingdom among
            # three sons").
            reason = _trigger_reason(numbered, profile, numbers=2)
        if reason:
            choices.append(ToolChoice(profile.name, reason))
        else:
            pending.append(profile)
    if choices or _other_tool_rule(text, profiles):
        # Beside a rule's tool, another by meaning only when its regression is sure of
        # it ("what time does the match kick off tonight?" is the clock's words and a
        # search's need); never by trigrams. The regressions alone are asked first (a
        # product with a few columns): most such messages need no more. A rule of a tool
        # the instance lacks counts too: "is the museum open today?" is the search's
        # question, not the clock's on an instance without the search.
        likely = _regression_scores(text, profiles) if embed and USE_EMBEDDINGS else {}
        pending = [p for p in pending if likely.get(p.name, 0.0) >= BESIDE_RULE_PROBABILITY]
    embedded = _embedding_scores(text, profiles) if pending and embed and USE_EMBEDDINGS else None
    if floor is not None:
        pending = [p for p in pending if p.name not in CLAUSE_RULES_ONLY]
    grams = trigrams(text) if pending and embedded is None else Counter()
    for profile in pending:
        reason = _similarity_reason(profile, embedded, grams, floor=floor, margin=margin)
        if reason:
            choices.append(_likelier(profile.name, reason, embedded, pending))
    # One choice per tool (two neighbours may give way to the same likelier tool).
    return list({c.name: c for c in choices}.values())


def _other_tool_rule(text: str, profiles: Sequence[ToolProfile]) -> bool:
    """Whether a trigger of a registered tool not among ``profiles`` (one the instance has
    not enabled) matches ``text``."""
    names = {p.name for p in profiles}
    return any(
        _trigger_reason(text, tool_profile(t.name, t.description))
        for t in all_tools()
        if t.name not in names
    )


def _likelier(
    name: str, reason: str, embedded: Similarity | None, pending: Sequence[ToolProfile]
) -> ToolChoice:
    """The choice of ``name`` by its nearest example, or, when another tool's regression
    finds the message clearly likelier (at least :data:`SWAP_MIN_PROBABILITY` and above
    ``name``'s) and that tool is among ``pending`` (enabled, not yet chosen), that tool:
    the neighbour says a tool is wanted, the regression which one ("remember that, my new
    address is …" is a save, not a lookup). A likelier tool the instance lacks (or one
    chosen already) changes nothing: the regression is less sure than the neighbour that
    no tool is wanted."""
    likely = embedded.likely if embedded is not None else {}
    best = max(likely, key=lambda tool: likely[tool]) if likely else name
    if (
        best != name
        and likely[best] >= max(SWAP_MIN_PROBABILITY, likely.get(name, 0.0))
        and best in {p.name for p in pending}
    ):
        return ToolChoice(best, f"likelier than {name} ({likely[best]:.2f}; {reason})")
    return ToolChoice(name, reason)
