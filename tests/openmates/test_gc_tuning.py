"""openmates.gc_tuning and its setting (GC_THRESHOLDS via openmates.env.env_ints)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from openmates import gc_tuning
from openmates.env import EnvError, env_ints


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_apply_sets_the_configured_thresholds_and_freezes_the_start_up_heap(
    settings, restore_gc
) -> None:
    settings.GC_THRESHOLDS = (40_000, 15, 90)
    assert gc_tuning.apply() == (40_000, 15, 90)
    assert gc.get_threshold() == (40_000, 15, 90)
    assert gc.get_freeze_count() > 0


def test_gc_thresholds_are_parsed_strictly(monkeypatch) -> None:
    default = (50_000, 20, 100)
    monkeypatch.delenv("GC_THRESHOLDS", raising=False)
    assert env_ints("GC_THRESHOLDS", default=default) == default
    monkeypatch.setenv("GC_THRESHOLDS", "1000, 5, 50")
    assert env_ints("GC_THRESHOLDS", default=default) == (1000, 5, 50)
    for bad in ("1000,5", "1000,x,50", "1000,0,50", "1,2,3,4"):
        monkeypatch.setenv("GC_THRESHOLDS", bad)
        with pytest.raises(EnvError, match="GC_THRESHOLDS"):
            env_ints("GC_THRESHOLDS", default=default)
