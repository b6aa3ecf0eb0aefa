"""openmates.switch_interval and its setting (GIL_SWITCH_INTERVAL_MS)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from openmates import switch_interval


@pytest.fixture
def restore_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_apply_sets_the_configured_interval_in_seconds(settings, restore_interval) -> None:
    settings.GIL_SWITCH_INTERVAL_MS = 0.25
    assert switch_interval.apply() == pytest.approx(0.00025)
    assert sys.getswitchinterval() == pytest.approx(0.00025)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_a_non_positive_interval_is_refused_and_the_old_one_kept(
    settings, restore_interval, bad: float
) -> None:
    sys.setswitchinterval(0.004)
    settings.GIL_SWITCH_INTERVAL_MS = bad
    with pytest.raises(ValueError, match="GIL_SWITCH_INTERVAL_MS"):
        switch_interval.apply()
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_the_server_process_applies_it() -> None:
    import openmates.asgi  # noqa: F401 (importing it is what Daphne does)

    assert sys.getswitchinterval() == pytest.approx(0.0005)


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("2", "2")])
def test_a_server_process_asks_for_one_blas_thread_unless_told(
    given: str | None, expected: str
) -> None:
    import os
    import subprocess

    # A fresh process, as Daphne's: the ASGI module sets it before anything loads numpy.
    code = "import os, openmates.asgi; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
