"""The local embedding models in a child process (openmates/embedding_worker.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from openmates import embeddings
from openmates.embedding_worker import EmbeddingWorker
from openmates.embeddings import LocalEmbeddingError

MODEL = "local/use-multilingual-v3"
TEXTS = ["Wie viel ist 17 mal 23?", "What time is it in Tokyo?", ""]


@pytest.fixture
def worker() -> Iterator[EmbeddingWorker]:
    made = EmbeddingWorker(MODEL, timeout_s=5.0)
    yield made
    made.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_child_gives_the_vectors_this_process_would(worker: EmbeddingWorker) -> None:
    vectors = worker.embed(TEXTS)

    here = embeddings.inline_embedder(MODEL).embed(TEXTS)
    assert np.asarray(vectors).shape == (3, 512)
    assert np.allclose(vectors, here, atol=1e-6)
    assert worker.pid is not None
    assert worker.pid != os.getpid()
    assert worker.embed([]) == []


def test_a_child_that_died_is_replaced(worker: EmbeddingWorker) -> None:
    first = worker.embed(["one"])
    old = worker.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)

    again = worker.embed(["one"])

    assert np.allclose(first, again, atol=1e-6)
    assert worker.pid not in (None, old)


def test_a_child_that_stopped_answering_is_killed_and_replaced() -> None:
    worker = EmbeddingWorker(MODEL, timeout_s=0.5, per_text_s=0.0)
    try:
        worker.embed(["warm"])
        old = worker.pid
        assert old is not None
        os.kill(old, signal.SIGSTOP)
        started = time.monotonic()

        vectors = worker.embed(["still answered"])

        assert len(vectors) == 1
        assert len(vectors[0]) == 512
        assert 0.5 <= time.monotonic() - started < 30
        assert worker.pid not in (None, old)
        deadline = time.monotonic() + 5
        while not _gone(old) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(old)
    finally:
        worker.close()


def test_a_model_the_child_cannot_load_fails_once_and_then_at_once() -> None:
    worker = EmbeddingWorker("local/no-such-model")
    with pytest.raises(LocalEmbeddingError, match="Unknown local embedding model"):
        worker.embed(["x"])
    assert worker.pid is None

    started = time.monotonic()
    with pytest.raises(LocalEmbeddingError, match="Unknown local embedding model"):
        worker.embed(["x"])
    assert time.monotonic() - started < 0.1  # no second child was started
    assert worker.pid is None


def test_local_embed_uses_a_child_only_when_the_setting_says_so(settings: Any) -> None:
    embeddings.close_workers()
    settings.LOCAL_EMBEDDING_PROCESS = False
    inline = embeddings.local_embed(MODEL, ["a cup of tea"])
    assert MODEL not in embeddings._workers or embeddings._workers[MODEL].pid is None

    settings.LOCAL_EMBEDDING_PROCESS = True
    in_child = embeddings.local_embed(MODEL, ["a cup of tea"])
    child = embeddings._workers[MODEL].pid
    assert child is not None
    assert child != os.getpid()
    assert np.allclose(inline, in_child, atol=1e-6)

    with pytest.raises(LocalEmbeddingError, match="Unknown local embedding model"):
        embeddings.local_embed("local/nothing", ["x"])
    assert "local/nothing" not in embeddings._workers
