"""The runner's serving loop (``openmates.runlocal.supervisor.Runner.watch``): a web
server that ends on the Ctrl-C the whole process group got is a stop, not an error."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from openmates.runlocal.supervisor import Runner, Stop


def _ended_server() -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=10)
    return process


def test_a_web_server_ended_by_the_signal_is_a_stop(tmp_path: Path) -> None:
    runner = Runner(directory=tmp_path, with_model=False)
    runner.daphne = _ended_server()
    # The signal lands just after the loop saw the server gone.
    threading.Timer(0.05, lambda: setattr(runner, "_signalled", True)).start()

    with pytest.raises(Stop):
        runner.watch()


def test_a_web_server_that_ends_by_itself_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = Runner(directory=tmp_path, with_model=False)
    runner.daphne = _ended_server()

    assert runner.watch() == 1
    assert "ERROR: the web server exited with code 0" in capsys.readouterr().out
