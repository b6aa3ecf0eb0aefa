"""Memory fixtures shared by every test module (listed in ``tests/conftest.py``'s
pytest_plugins).

The autouse :func:`_memory_extraction_off` takes the extraction hook out of
post-processing for the test: ``pipeline.apps`` installs it at start-up, and it makes one
more ``fast`` call after every finished turn, which a test that does not script it would
see as an unscripted model call. A test about extraction asks for
:func:`memory_extraction`, which keeps the installed hook (and returns it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _memory_extraction_off(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Post-processing without the extraction hook, unless the test uses
    :func:`memory_extraction`."""
    if "memory_extraction" in request.fixturenames:
        return
    from pipeline import postprocess

    monkeypatch.setattr(postprocess, "_memory_extractor", None)


@pytest.fixture
def memory_extraction() -> Callable[..., Any]:
    """The extraction hook ``pipeline.apps`` installed (left in place for the test)."""
    from pipeline import postprocess

    hook = postprocess._memory_extractor
    assert hook is not None, "pipeline.apps installs the memory extraction hook"
    return hook
