"""``manage.py runlocal``: the embedded default, started as a user starts it.

The full-cycle test runs the real command in a subprocess on a fresh data directory
(without the local model, which has its own test), talks to it over HTTP and from a
second ``manage.py`` process, stops it with SIGINT and starts it again. Every file the
services wrote stays owner-only, and a data directory left readable by an older version
is made owner-only on the next start.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from openmates.runlocal.llama import LocalModelServer
from openmates.runlocal.postgres import SYSTEM_USER
from openmates.runlocal.process import ServiceError, free_port, port_in_use, restrict_to_owner
from openmates.runlocal.supervisor import (
    Runner,
    data_dir_lock,
    secret_key,
    stop_strays,
    write_private,
)
from tests.openmates.test_served_origin import settings_of

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SERVICE_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "VAULT_ADDR",
    "VAULT_TOKEN",
    "VAULT_ADMIN_TOKEN",
    "VAULT_ROLE_ID",
    "VAULT_SECRET_ID",
    "LLM_LOCAL_API_BASE",
    "SECRET_KEY",
)


def runlocal_env(data_dir: Path) -> dict[str, str]:
    """The environment of a user who set nothing: every service is embedded."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env["OPENMATES_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Run:
    """A ``manage.py runlocal`` subprocess whose output is collected line by line."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runlocal", "--port", str(port), "--no-model"],
            cwd=BASE_DIR,
            env=runlocal_env(data_dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.output:
                return
            if self.process.poll() is not None:
                self._reader.join(5)
                break
            time.sleep(0.1)
        raise AssertionError(f"runlocal never printed {text!r}:\n{self.output}")

    def interrupt(self, timeout_s: float = 60) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout_s)
        self._reader.join(5)
        return code


def manage(data_dir: Path, *args: str) -> str:
    """Run another manage.py command "from a second terminal"."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=runlocal_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


DEMO_PROBE = (
    "from django.contrib.auth import get_user_model; "
    "u = get_user_model().objects.get(username='demo'); "
    "print('DEMO', u.pk, u.date_joined.isoformat(), u.is_staff)"
)


def demo_lines(data_dir: Path) -> list[str]:
    """The demo user's id, creation time and staff flag, read by a second process."""
    output = manage(data_dir, "shell", "-c", DEMO_PROBE)
    lines = [line for line in output.splitlines() if line.startswith("DEMO ")]
    assert len(lines) == 1, output
    return lines


def assert_production_mode_over_plain_http(port: int, password: str) -> None:
    """The web server runs without DEBUG, yet the demo signs in over http://127.0.0.1."""
    base = f"http://127.0.0.1:{port}"
    # Every service is up; the local model is not started in this test (--no-model).
    ready = httpx.get(f"{base}/health/ready", timeout=10).json()
    assert ready["not_ready"] == ["llm"], ready
    missing = httpx.get(f"{base}/no-such-page/", timeout=10)
    assert missing.status_code == 404
    # DEBUG's 404 page lists the URLconf; its 500 page would list DATABASE_URL.
    assert b"URLconf" not in missing.content
    with httpx.Client(base_url=base, timeout=10) as browser:
        page = browser.get("/accounts/login/")
        assert "secure" not in page.headers["set-cookie"].lower()
        signed_in = browser.post(
            "/accounts/login/",
            data={
                "username": "demo",
                "password": password,
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
        )
        assert signed_in.status_code == 302, signed_in.text
        session_cookies = signed_in.headers.get_list("set-cookie")
        assert any(c.startswith("sessionid=") for c in session_cookies)
        assert not any("secure" in c.lower() for c in session_cookies)
        assert browser.get("/").status_code == 200


def loose_entries(root: Path) -> list[str]:
    """Entries of ``root`` (itself included) that grant their group or others anything.

    Run as root, PostgreSQL's server user is let through the directories above its
    cluster by its own group's execute bit (``openmates-pg``, no listing): allowed.
    """
    server_gid = pwd.getpwnam(SYSTEM_USER).pw_gid if os.geteuid() == 0 else None
    loose = []
    for path in [root, *root.rglob("*")]:
        try:
            info = path.lstat()
        except FileNotFoundError:  # a server's temporary file, renamed meanwhile
            continue
        extra = stat.S_IMODE(info.st_mode) & 0o077
        traversal = stat.S_ISDIR(info.st_mode) and info.st_gid == server_gid
        if stat.S_ISLNK(info.st_mode) or not extra or (traversal and extra == stat.S_IXGRP):
            continue
        loose.append(f"{path.relative_to(root.parent)} {oct(stat.S_IMODE(info.st_mode))}")
    return loose


def write_through_redis(url: str) -> None:
    """A key written and synced to the append-only file, an AOF rewrite and an RDB save."""
    client = redis.Redis.from_url(url)
    client.set("openmates:test:permissions", "x")
    client.bgrewriteaof()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        persistence = client.info("persistence")
        if not persistence["aof_rewrite_in_progress"] and not persistence["aof_rewrite_scheduled"]:
            break
        time.sleep(0.1)
    client.save()
    client.close()


def web_server_environment(port: int) -> dict[str, str]:
    """The environment of the running Daphne serving ``port`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"openmates.asgi:application" in arguments and str(port).encode() in arguments:
            pairs = (entry / "environ").read_bytes().split(b"\0")
            return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)
    raise AssertionError(f"no web server on port {port}")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Outside pytest's temp root: a concurrent pytest session re-chmods
    # /tmp/pytest-of-<user> to 0700, which would lock PostgreSQL's server user out.
    root = Path(tempfile.mkdtemp(prefix="openmates-runlocal-test-"))
    directory = root / "var"
    yield directory
    # Throw away the socket directories the embedded services made under /tmp.
    from openmates.runlocal.postgres import EmbeddedPostgres
    from openmates.runlocal.redis import EmbeddedRedis

    EmbeddedPostgres(directory / "postgres").destroy()
    EmbeddedRedis(directory / "redis").destroy()
    shutil.rmtree(root, ignore_errors=True)


def test_runlocal_serves_stops_on_sigint_and_keeps_data_on_the_next_start(
    data_dir: Path,
) -> None:
    port = free_port()
    first = Run(data_dir, port)
    try:
        first.wait_for("OpenMates is running")
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10, follow_redirects=True)
        assert page.status_code == 200
        # WhiteNoise serves it (finders, no collectstatic): no proxy in front of runlocal.
        asset = next(path for path in (BASE_DIR / "static").rglob("*.css") if path.is_file())
        url = f"http://127.0.0.1:{port}/static/{asset.relative_to(BASE_DIR / 'static')}"
        assert httpx.get(url, timeout=10).content == asset.read_bytes()
        recorded = json.loads((data_dir / "services.json").read_text())
        assert (data_dir / "services.json").stat().st_mode & 0o777 == 0o600
        assert {"DATABASE_URL", "REDIS_URL", "VAULT_ADDR", "VAULT_TOKEN", "SECRET_KEY"} <= set(
            recorded
        )
        # The admin token only by its file's path, and never in the web server.
        assert "VAULT_ADMIN_TOKEN" not in recorded
        assert Path(recorded["VAULT_ADMIN_TOKEN_FILE"]) == data_dir / "openbao" / "admin_token"
        web = web_server_environment(port)
        assert "VAULT_ADMIN_TOKEN" not in web
        assert web["VAULT_ADMIN_TOKEN_FILE"] == ""
        assert web["OPENMATES_URL"] == f"http://127.0.0.1:{port}/"
        # A command from a second terminal reads it from the file: rotate the demo's key.
        assert "keys rotated: 1," in manage(data_dir, "rotate_keys")
        # Set-up done, the root token is gone: only the unseal key stays next to the tokens.
        init = json.loads((data_dir / "openbao" / "init.json").read_text())
        assert set(init) == {"unseal_key"}
        assert (data_dir / "openbao" / "init.json").stat().st_mode & 0o777 == 0o600
        before = demo_lines(data_dir)
        password = (data_dir / "demo_password").read_text().strip()
        assert f"password '{password}'" in first.output
        assert_production_mode_over_plain_http(port, password)
        # The sign-in stored a session in Redis; its AOF, a rewrite and a snapshot follow.
        write_through_redis(recorded["REDIS_URL"])
        assert (data_dir / "redis" / "appendonly.aof").exists()
        assert (data_dir / "redis" / "dump.rdb").exists()
        assert loose_entries(data_dir) == []
    finally:
        code = first.interrupt()
    assert code == 0, first.output
    assert "==> stopped" in first.output
    assert not port_in_use(port)

    # As an older version left it: readable by every local account.
    for path in (data_dir, data_dir / "redis", data_dir / "openbao"):
        path.chmod(0o755)
    for path in (data_dir / "redis" / "appendonly.aof", data_dir / "services.json"):
        path.chmod(0o644)
    second = Run(data_dir, port)
    try:
        second.wait_for("OpenMates is running")
        assert "initialising" not in second.output
        assert "made owner-only" in second.output
        assert demo_lines(data_dir) == before
        assert f"password '{password}'" in second.output
        write_through_redis(json.loads((data_dir / "services.json").read_text())["REDIS_URL"])
        assert loose_entries(data_dir) == []
    finally:
        assert second.interrupt() == 0, second.output


def test_runlocal_reports_a_port_in_use_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "manage.py", "runlocal", "--port", str(port), "--no-model"],
            cwd=BASE_DIR,
            env=runlocal_env(tmp_path / "var"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert f"Port {port} on 127.0.0.1 is already in use" in output
    assert f"--port {port + 1}" in output
    assert "Traceback" not in output
    assert not (tmp_path / "var" / "postgres").exists()


def test_an_old_data_dir_is_made_owner_only_without_following_links(tmp_path: Path) -> None:
    root = tmp_path / "var"
    (root / "redis").mkdir(parents=True, mode=0o755)
    (root / "redis" / "appendonly.aof").write_text("*2\r\n")
    (root / "redis" / "appendonly.aof").chmod(0o644)
    (root / "run.sh").write_text("")
    (root / "run.sh").chmod(0o775)
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not ours to change")
    outside.chmod(0o644)
    (root / "link").symlink_to(outside)
    root.chmod(0o755)
    changed = restrict_to_owner(root)
    assert sorted(path.name for path in changed) == ["appendonly.aof", "redis", "run.sh", "var"]
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "redis").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "redis" / "appendonly.aof").stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert restrict_to_owner(root) == []


def test_services_create_their_files_owner_only(tmp_path: Path) -> None:
    from openmates.runlocal.redis import EmbeddedRedis

    previous = os.umask(0o022)  # a typical login shell's
    server = EmbeddedRedis(tmp_path / "redis", persistent=True)
    try:
        write_through_redis(server.start())
        assert loose_entries(tmp_path / "redis") == []
        assert stat.S_IMODE(server.run_dir.stat().st_mode) == 0o700
    finally:
        server.destroy()
        os.umask(previous)


def test_a_second_runner_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    tmp_path.joinpath("var").mkdir()
    with (
        data_dir_lock(tmp_path / "var"),
        pytest.raises(ServiceError, match="already in use"),
        data_dir_lock(tmp_path / "var"),
    ):
        pass


def test_the_web_server_is_given_no_admin_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "openbao" / "admin_token"
    token_file.parent.mkdir()
    write_private(token_file, "admin-token\n")
    # As runlocal records it, and an admin token in the user's shell as well.
    services = {"VAULT_TOKEN": "app-token", "VAULT_ADMIN_TOKEN_FILE": str(token_file)}
    write_private(tmp_path / "services.json", json.dumps(services))
    for name in SERVICE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VAULT_ADMIN_TOKEN", "admin-token-from-the-shell")
    runner = Runner(directory=tmp_path, port=8123)
    web = runner.web_env()
    assert "VAULT_ADMIN_TOKEN" not in web
    web_settings = settings_of(web, monkeypatch)
    assert web_settings["VAULT_TOKEN"] == "app-token"
    assert web_settings["VAULT_ADMIN_TOKEN"] == ""
    assert web_settings["VAULT_ADMIN_TOKEN_FILE"] == ""
    # Management commands (the demo set-up, a second terminal) can still reach it.
    command_settings = settings_of(runner.child_env(), monkeypatch)
    assert command_settings["VAULT_ADMIN_TOKEN"] == "admin-token-from-the-shell"
    monkeypatch.delenv("VAULT_ADMIN_TOKEN")
    second_terminal = settings_of({"OPENMATES_DATA_DIR": str(tmp_path)}, monkeypatch)
    assert second_terminal["VAULT_ADMIN_TOKEN"] == ""
    assert second_terminal["VAULT_ADMIN_TOKEN_FILE"] == str(token_file)


def test_secret_key_is_generated_once_and_private(tmp_path: Path) -> None:
    first = secret_key(tmp_path)
    assert len(first) >= 50
    assert secret_key(tmp_path) == first
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    write_private(tmp_path / "services.json", "{}")
    assert (tmp_path / "services.json").stat().st_mode & 0o777 == 0o600


def test_local_model_server_runs_with_a_large_context_and_no_request_interruption(
    tmp_path: Path,
) -> None:
    server = LocalModelServer(tmp_path, 8123)
    command = server.command()
    assert command[command.index("--n_ctx") + 1] == "8192"
    assert command[command.index("--interrupt_requests") + 1] == "False"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert server.api_base == "http://127.0.0.1:8123/v1"
    assert server.model_path == tmp_path.resolve() / "models" / "gemma-3-270m-q4_k_m.gguf"


def test_a_server_left_behind_by_a_killed_run_is_stopped_on_the_next_start(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "var"
    # Stands in for an OpenBao whose runner was killed: same command-line marker.
    stray = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            f"-config={directory / 'openbao' / 'openbao.hcl'}",
        ]
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop_strays(directory)
        assert stray.wait(5) == -signal.SIGTERM
        assert other.poll() is None
    finally:
        for process in (stray, other):
            process.kill()
            process.wait()
