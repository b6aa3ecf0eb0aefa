"""The real bundled model and the real local embedding model, with the network guard on.

The Gemma GGUF is assembled once into ``~/.cache/openmates/models`` (or
``$OPENMATES_TEST_MODEL_DIR``) and served by llama-cpp-python's server on a free
loopback port for this module (``openmates.runlocal.llama.LocalModelServer``, the same
starter ``runlocal`` uses).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openmates import llm
from openmates.llm_stream import Finish, TextDelta, Usage
from openmates.runlocal.llama import MODEL_NAME, LocalModelServer
from openmates.runlocal.process import free_port

pytestmark = pytest.mark.local_model

QUESTION = [
    {"role": "system", "content": "You answer questions about geography in one sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def local_model_api_base() -> Iterator[str]:
    directory = Path(os.environ.get("OPENMATES_TEST_MODEL_DIR", "~/.cache/openmates"))
    server = LocalModelServer(
        directory.expanduser(), free_port(), context_tokens=8192, say=lambda message: None
    )
    api_base = server.start(timeout_s=240)
    yield api_base
    server.stop()


@pytest.fixture
def local_tiers(settings: Any, local_model_api_base: str) -> str:
    model = f"text-completion-openai/{MODEL_NAME}"
    settings.LLM_LOCAL_API_BASE = local_model_api_base
    settings.LLM_LOCAL_MAX_TOKENS = 24
    settings.LLM_RETRIES = 0
    settings.LLM_DEFAULT_TIERS = {
        tier: [{"model": model, "api_base": local_model_api_base}]
        for tier in ("fast", "standard", "heavy")
    }
    return model


async def test_bundled_model_completes_streams_and_local_embeddings_work(local_tiers: str) -> None:
    result = await llm.complete(tier="fast", messages=QUESTION, timeout_s=120)

    health = llm.health()
    assert (health["status"], health["reason"]) == ("up", None)
    assert health["endpoint"].startswith(f"{local_tiers} at http://127.0.0.1:")

    assert result.text.strip()
    assert result.model == local_tiers
    assert result.usage.prompt_tokens > 10
    assert 0 < result.usage.completion_tokens <= 24
    assert result.finish_reason in {"stop", "length"}

    events = [e async for e in llm.stream(tier="standard", messages=QUESTION, timeout_s=120)]

    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text.strip()
    assert "Q:" not in text  # the stop sequences end the turn
    assert isinstance(events[-1], Finish)
    assert events[-1].model == local_tiers
    assert events[-1].reason in {"stop", "length"}
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1
    assert usage[0].completion_tokens > 0

    vectors = await llm.embed(["Paris is the capital of France.", "France's capital city"])
    assert [len(v) for v in vectors] == [384, 384]
    assert sum(a * b for a, b in zip(*vectors, strict=True)) > 0.5
