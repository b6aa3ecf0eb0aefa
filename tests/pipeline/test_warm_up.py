"""A server process loads the language identifier at start-up, in a thread, so the first
message does not wait ~0.5 s for it; commands and tests do not load it then."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.apps import apps

from pipeline import preprocess


@pytest.fixture
def unloaded_identifier() -> Iterator[None]:
    loaded = preprocess._identifier
    preprocess._identifier = None
    yield
    preprocess._identifier = loaded


def _warm_up_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "langid-warm-up"]


@pytest.mark.usefixtures("unloaded_identifier")
def test_a_server_process_loads_the_language_identifier_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.argv", ["/usr/bin/daphne", "openmates.asgi:application"])

    apps.get_app_config("pipeline").ready()
    for thread in _warm_up_threads():
        thread.join(timeout=30)

    assert preprocess._identifier is not None
    assert preprocess.detect_language("Wie spät ist es heute in Berlin?", fallback="en") == "de"


@pytest.mark.usefixtures("unloaded_identifier")
def test_a_management_command_does_not_load_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["manage.py", "migrate"])

    apps.get_app_config("pipeline").ready()

    assert _warm_up_threads() == []
    assert preprocess._identifier is None
