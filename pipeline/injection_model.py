"""Prompt-injection detection by meaning (docs/architecture.md §6), beside the phrase
signals of :mod:`pipeline.injection`.

A logistic-regression classifier over sentence vectors of the packaged multilingual model
(``settings.PREPROCESS_EMBEDDING_MODEL``, USE multilingual v3): trained once per process
(:func:`warm_up`, about a second) on the labelled sentences of
``pipeline/injection_sentences.tsv`` — sentences that address the model reading a tool's
output and try to change what it does, and look-alikes that do not (to-do lists,
recipes, security articles, "please ignore my previous email") — by Newton's method on
the L2-regularised log-loss (iteratively reweighted least squares; Hastie, Tibshirani &
Friedman, *The Elements of Statistical Learning*, 2nd ed., §4.4.1).

:func:`injection_probability` splits a text into sentences, scores at most
:data:`MAX_SENTENCES` of them and returns the highest probability with its sentence.
Without the model (package missing) every text scores 0.0, and the phrase signals
decide alone.
"""

from __future__ import annotations

import csv
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from openmates.embeddings import LocalEmbeddingError, local_embed

logger = logging.getLogger(__name__)

CORPUS = Path(__file__).with_name("injection_sentences.tsv")
# A long page is scored on its first sentences: the cost grows with their number
# (about 0.7 ms a sentence, batched), and injections are rarely buried past them.
MAX_SENTENCES = 64
MAX_SENTENCE_CHARS = 300
MIN_SENTENCE_CHARS = 12
# L2 penalty on the weights (not the bias), set on the development splits.
L2_PENALTY = 1.0
NEWTON_STEPS = 25

# Sentence ends (also before a closing quote), line breaks (also escaped ones) and the
# marks of HTML comments and table cells: an instruction is often a fragment between them.
_SPLIT_RE = re.compile(
    r"(?<=[.!?\u3002\uff01\uff1f])\s+|(?<=[.!?]['\"\u2019\u201d\u00bb\u300d])\s+"
    r"|[\u3002\uff01\uff1f]|\n+|\\n|<!--|-->|\|\s"
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The most injection-like sentence of a text and its probability (0-1)."""

    probability: float
    sentence: str


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` worth scoring: split at sentence ends, line breaks and
    comment or cell marks, each cut to :data:`MAX_SENTENCE_CHARS`, shorter than
    :data:`MIN_SENTENCE_CHARS` (a CJK character counting two) dropped, at most
    :data:`MAX_SENTENCES`."""
    found: list[str] = []
    for part in _SPLIT_RE.split(text):
        part = " ".join(part.split())
        # A CJK character says about as much as two Latin ones.
        if len(part) + sum(ch >= "\u3000" for ch in part) >= MIN_SENTENCE_CHARS:
            found.append(part[:MAX_SENTENCE_CHARS])
            if len(found) == MAX_SENTENCES:
                break
    return found


def _embed(texts: list[str]) -> Any:
    import numpy as np

    vectors = local_embed(settings.PREPROCESS_EMBEDDING_MODEL, texts)
    return np.asarray(vectors, dtype=np.float64)


def logistic_fit(features: Any, labels: Any, *, penalty: float = L2_PENALTY) -> Any:
    """Weights (bias last) of an L2-regularised logistic regression, by Newton's method.

    ``features``: (n, d) array; ``labels``: (n,) array of 0/1. Returns a (d + 1,) array.
    The bias is not penalised.
    """
    import numpy as np

    design = np.hstack([features, np.ones((features.shape[0], 1))])
    weights = np.zeros(design.shape[1])
    ridge = np.full(design.shape[1], penalty)
    ridge[-1] = 0.0
    for _ in range(NEWTON_STEPS):
        probability = 1.0 / (1.0 + np.exp(-(design @ weights)))
        gradient = design.T @ (probability - labels) + ridge * weights
        curvature = probability * (1.0 - probability)
        hessian = (design * curvature[:, None]).T @ design + np.diag(ridge)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if float(np.abs(step).max()) < 1e-6:
            break
    return weights


class _Classifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weights: Any = None
        self.available = True

    def weights(self) -> Any | None:
        with self._lock:
            if self._weights is None and self.available:
                try:
                    self._weights = self._train()
                except (LocalEmbeddingError, ImportError, OSError) as exc:
                    logger.warning("injection screening without the sentence model: %s", exc)
                    self.available = False
            return self._weights

    @staticmethod
    def _train() -> Any:
        import numpy as np

        with CORPUS.open(encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
        labels = np.array([row["label"] == "injection" for row in rows], dtype=np.float64)
        return logistic_fit(_embed([row["text"] for row in rows]), labels)


_classifier = _Classifier()


def warm_up() -> None:
    """Train the classifier now (embedding the corpus: about a second) instead of on the
    first tool output."""
    _classifier.weights()


def injection_probability(text: str) -> Verdict:
    """The highest injection probability among the :func:`sentences` of ``text`` (read
    as the model reads it: pass :func:`pipeline.injection.revealed_text`'s text), with
    that sentence; ``Verdict(0.0, "")`` without sentences or without the model."""
    import numpy as np

    found = sentences(text)
    weights = _classifier.weights() if found else None
    if weights is None:
        return Verdict(0.0, "")
    try:
        scores = _embed(found) @ weights[:-1] + weights[-1]
    except Exception:
        # The phrase signals still screen the output.
        logger.exception("injection screening could not embed %d sentences", len(found))
        return Verdict(0.0, "")
    best = int(np.argmax(scores))
    return Verdict(float(1.0 / (1.0 + np.exp(-scores[best]))), found[best])
