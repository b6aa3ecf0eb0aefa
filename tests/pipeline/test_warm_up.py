"""A server process loads the pre-processing models in a thread once a chat socket opens
(a user is about to send), not at start-up, so an idle server stays small; commands and
tests do not load them then."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.apps import apps

from pipeline import preprocess, tool_match, warm_up
from pipeline.db import db_call
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unloaded_models(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    loaded = preprocess._identifier
    preprocess._identifier = None
    fresh = tool_match._Vectors()
    monkeypatch.setattr(tool_match, "_vectors", fresh)
    warm_up.disable()
    yield
    warm_up.disable()
    preprocess._identifier = loaded


def _warm_up_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == warm_up.THREAD_NAME]


@pytest.mark.usefixtures("unloaded_models")
async def test_a_server_process_loads_the_models_when_the_first_socket_opens(
    monkeypatch: pytest.MonkeyPatch, ws_client: Callable[..., Any]
) -> None:
    from skills.registry import all_tools

    monkeypatch.setattr("sys.argv", ["/usr/bin/daphne", "openmates.asgi:application"])
    apps.get_app_config("pipeline").ready()
    # Started and idle: nothing is loaded.
    assert _warm_up_threads() == []
    assert preprocess._identifier is None

    user = await db_call(UserFactory)
    await ws_client(user)
    (thread,) = _warm_up_threads()
    await asyncio.to_thread(thread.join, 60)

    assert not thread.is_alive()
    assert preprocess._identifier is not None
    assert preprocess.detect_language("Wie spät ist es heute in Berlin?", fallback="en") == "de"
    # Every registered tool's example vectors are made: a turn's preselection has them.
    tool = all_tools()[0]
    matrix = tool_match._vectors.of_texts(
        tool_match.tool_profile(tool.name, tool.description).texts, wait=False
    )
    assert matrix is not None
    assert matrix.shape[0] >= 1
    # A second socket starts no second warm-up.
    await ws_client(user)
    assert _warm_up_threads() == []
    assert warm_up.soon() is thread


@pytest.mark.usefixtures("unloaded_models")
def test_a_management_command_does_not_load_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["manage.py", "migrate"])

    apps.get_app_config("pipeline").ready()

    assert warm_up.soon() is None
    assert _warm_up_threads() == []
    assert preprocess._identifier is None
