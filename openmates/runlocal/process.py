"""Shared pieces for the embedded services: free ports, readiness waits, errors, and the
owner-only rule of the data directory."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Every file and directory under the data directory is the owner's alone (0600/0700): it
# holds the session keys (Redis), the database, the unseal key and the tokens. Each
# service runs with this umask, so what it creates later is private from the start.
PRIVATE_UMASK = 0o077


class ServiceError(RuntimeError):
    """An embedded service could not be started, reached or stopped; the message says why."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def wait_until(
    probe: Callable[[], bool], *, timeout_s: float, what: str, interval_s: float = 0.05
) -> None:
    """Call ``probe`` until it returns True.

    Raises:
        ServiceError: ``probe`` did not succeed within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(interval_s)
    raise ServiceError(f"{what} did not become ready within {timeout_s:.0f} s")


def socket_dir(preferred: Path, name: str) -> Path:
    """A directory for a unix socket whose full path fits the 107-byte limit.

    Returns ``preferred`` when its socket paths are short enough, else a directory under
    the system temp dir named after a hash of ``preferred`` (stable across restarts).
    """
    longest = preferred / ".s.PGSQL.65535.lock"
    if len(str(longest).encode()) < 100:
        return preferred
    digest = hashlib.sha256(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"openmates-{name}-{digest}"


def restrict_to_owner(root: Path) -> list[Path]:
    """Take every group and other permission bit off ``root`` and everything under it.

    Fixes a data directory made before the owner-only rule (or by a wider umask). Symbolic
    links are neither changed nor followed. Returns the paths that were changed.
    """
    changed: list[Path] = []
    for path in [root, *_walk(root)]:
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:  # a service removed it meanwhile
            continue
        if stat.S_ISLNK(mode) or not mode & 0o077:
            continue
        path.chmod(stat.S_IMODE(mode) & ~0o077)
        changed.append(path)
    return changed


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, directories, files in os.walk(root):
        base = Path(folder)
        found.extend(base / name for name in (*directories, *files))
    return found
