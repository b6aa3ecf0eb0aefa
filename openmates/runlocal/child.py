"""Child processes of the embedded runner: started so they never outlive it.

Every server ``runlocal`` starts itself (Daphne, the local model) runs in its own
process group, so the terminal's Ctrl-C reaches only the runner, which then stops the
children in order. On Linux each child also asks the kernel for SIGTERM when the runner
dies, so a killed runner leaves no orphan holding a port. Every child runs with the
owner-only umask (``PRIVATE_UMASK``): what it writes into the data directory stays private.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from openmates.runlocal.process import PRIVATE_UMASK

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec; must not allocate much or take locks.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def child_preexec(nice: int = 0) -> Callable[[], None]:
    """The pre-exec hook of a child: die with this thread, lowered by ``nice`` if given.

    For ``subprocess.Popen(..., start_new_session=True, preexec_fn=child_preexec())``
    where ``start_child`` does not fit (captured output).
    """
    if not nice:
        return _die_with_parent

    def prepare() -> None:
        _die_with_parent()
        os.nice(nice)

    return prepare


def start_child(
    args: Sequence[str],
    *,
    log_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    nice: int = 0,
) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new process group; output goes to ``log_file`` (appended, 0600) or
    ours. The child's umask is ``PRIVATE_UMASK``.

    ``nice`` lowers the child's CPU priority (a background loader must not slow the web
    server's start on a two-core machine).

    The caller must be the thread that stays alive as long as the child should (the
    kernel's parent-death signal follows the thread that forked, not the process).
    """
    stdout: IO[bytes] | None = None
    if log_file is not None:
        log_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        stdout = os.fdopen(os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    try:
        return subprocess.Popen(  # the pre-exec hook only calls prctl
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=child_preexec(nice),
            umask=PRIVATE_UMASK,
        )
    finally:
        if stdout is not None:
            stdout.close()


def wait_or_kill(process: subprocess.Popen[Any], *, timeout_s: float = 10) -> None:
    """Wait up to ``timeout_s`` seconds for ``process`` to exit, then SIGKILL it and reap it."""
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_child(process: subprocess.Popen[Any] | None, *, timeout_s: float = 10) -> None:
    """Send SIGTERM, wait up to ``timeout_s`` seconds, then SIGKILL; no-op when gone."""
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
