"""A live Daphne serving the app for the /v1 tests, its models played by a loopback
OpenAI-format server (``tests.ui.wire.UIModelServer``), and instance keys.

Tests use ``transactional_db`` so what they create is committed and visible to the
server process; the server reads the same PostgreSQL, Redis and OpenBao.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.ui.conftest import daphne_serving
from tests.ui.wire import UIModelServer


@pytest.fixture(scope="module")
def v1_llm() -> Iterator[UIModelServer]:
    """The loopback model server the live app talks to (one per module)."""
    server = UIModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def model_server(v1_llm: UIModelServer) -> UIModelServer:
    """``v1_llm`` with nothing queued and no requests recorded."""
    v1_llm.reset()
    return v1_llm


@pytest.fixture(scope="module")
def v1_server(
    django_db_setup: Any, django_db_blocker: Any, v1_llm: UIModelServer, tmp_path_factory: Any
) -> Iterator[str]:
    """The base URL of a live Daphne serving the app."""
    env = {"OPENAI_API_KEY": "sk-v1-test", "V1_REQUESTS_PER_MINUTE": "1000"}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = v1_llm.api_base
    with daphne_serving(env, tmp_path_factory.mktemp("daphne-v1")) as base:
        yield base


@pytest.fixture
async def inprocess_turns() -> AsyncIterator[None]:
    """For in-process /v1 tests: afterwards, the turns of this test's event loop ended
    (post-processing too), its registry stopped and the channel layer's pools closed."""
    from channels.layers import channel_layers

    from pipeline import runtime

    yield
    await asyncio.wait_for(runtime.registry().wait_idle(), 20)
    await asyncio.wait_for(runtime.registry().stop(), 20)
    layer = channel_layers.backends.pop("default", None)
    if layer is not None:
        await layer.close_pools()
