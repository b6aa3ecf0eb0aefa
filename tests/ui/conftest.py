"""Browser tests against a live Daphne serving OpenMates on the test database.

``asgi_server`` starts ``daphne openmates.asgi:application`` (static files through
WhiteNoise, as in production) in a subprocess on a free loopback port, with the test
session's PostgreSQL (the test database), Redis and OpenBao, and the model tiers pointed
at ``ui_llm`` (a loopback OpenAI-compatible server the test scripts). Tests use
``transactional_db`` so what they create is committed and visible to the server process.
``ui_browser`` is headless Debian Chromium through Playwright's sync API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from openmates.runlocal.supervisor import WEBSOCKET_MAX_MESSAGE_BYTES
from tests.ui.wire import UIModelServer

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


# The Daphne processes daphne_process runs now (tests/live_quiet.py waits for them to be
# quiet before a test's database flush).
LIVE_SERVERS: set[subprocess.Popen[bytes]] = set()
# Each live server's log, by base URL (a failed test's report ends with its last lines).
SERVER_LOGS: dict[str, Path] = {}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _test_database_url(name: str) -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def ui_llm() -> Iterator[UIModelServer]:
    """The loopback model server the live app talks to (one per session)."""
    server = UIModelServer().start()
    yield server
    server.stop()


@contextmanager
def daphne_process(
    extra_env: dict[str, str], log_dir: Path, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run Daphne on the test database with ``extra_env`` (on ``port``, else a free one);
    yields ``(base URL, process)``.

    The process may be killed by the test; it is stopped on exit if still running.
    """
    from django.db import connection

    port = port or _free_port()
    env = dict(os.environ)
    env["DATABASE_URL"] = _test_database_url(connection.settings_dict["NAME"])
    env["DJANGO_SETTINGS_MODULE"] = "openmates.settings"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra_env)
    log = log_dir / "daphne.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-v",
                "0",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                # The same limits runlocal gives Daphne (4 MiB protocol frames must arrive).
                "--websocket-max-message-size",
                str(WEBSOCKET_MAX_MESSAGE_BYTES),
                "--websocket-max-frame-size",
                str(WEBSOCKET_MAX_MESSAGE_BYTES),
                "openmates.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    LIVE_SERVERS.add(process)
    SERVER_LOGS[base] = log
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"daphne did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.1)
        yield base, process
    finally:
        LIVE_SERVERS.discard(process)
        SERVER_LOGS.pop(base, None)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()


@contextmanager
def daphne_serving(extra_env: dict[str, str], log_dir: Path) -> Iterator[str]:
    """Run Daphne on the test database with ``extra_env``; yields its base URL."""
    with daphne_process(extra_env, log_dir) as (base, _process):
        yield base


@pytest.fixture(scope="module")
def asgi_server(
    django_db_setup: Any, django_db_blocker: Any, ui_llm: UIModelServer, tmp_path_factory: Any
) -> Iterator[str]:
    """The base URL of a live Daphne serving the app, its models played by ``ui_llm``."""
    env = {"OPENAI_API_KEY": "sk-ui-test", "SKILLS_WEB_SEARCH_API_BASE": ui_llm.origin}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = ui_llm.api_base
    with daphne_serving(env, tmp_path_factory.mktemp("daphne")) as base:
        yield base


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Allow the ORM in tests that also drive Playwright's sync API.

    Playwright's sync API keeps an asyncio loop registered on the test's thread, so
    Django takes every ORM call there for one made from async code. The calls are
    plain synchronous ones between browser steps; nothing runs concurrently with them.
    Module scope, so the database flush after each test is covered too.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="module")
def ui_browser() -> Iterator[Any]:
    """Headless Chromium (one per test module)."""
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()
    playwright.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed browser test's report gets what its pages sent, received and logged."""
    report = yield
    trace = getattr(item, "browser_trace", None)
    if report.when == "call" and report.failed and trace is not None:
        report.sections.append(("browser trace", trace.dump()))
        for base, log in list(SERVER_LOGS.items()):
            with contextlib.suppress(OSError):
                tail = log.read_text(errors="replace").splitlines()[-60:]
                report.sections.append((f"server log of {base}", "\n".join(tail)))
    return report


# Each shown message of the conversation: its classes, data attributes and first words.
_SHOWN_MESSAGES = """() => [...document.querySelectorAll('#messages-inner > *')]
  .map((e) => `${e.className} ${JSON.stringify(e.dataset)} ${e.innerText.slice(0, 80)}`)
  .join('\\n')"""


class _Trace:
    """What a browser context's pages did, kept to explain a failed test: WebSocket frames
    (cut to 300 characters, a run of stream deltas counted on one line), console lines and
    page errors: the last ``LIMIT`` lines, then each page's shown messages."""

    LIMIT = 240

    def __init__(self, context: Any) -> None:
        self.context = context
        self.lines: list[str] = []
        self.started = time.monotonic()
        context.on("page", self._watch)

    def _note(self, page: int, text: str) -> None:
        # A run of stream deltas is one line with its count.
        delta = text.startswith(('< {"type":"stream.delta"', '< {"type": "stream.delta"'))
        marker = f" p{page} stream.delta x"
        if delta and self.lines and marker in self.lines[-1]:
            head, count = self.lines[-1].rsplit(" x", 1)
            self.lines[-1] = f"{head} x{int(count) + 1}"
            return
        stamp = f"{time.monotonic() - self.started:7.2f}s"
        self.lines.append(f"{stamp}{marker}1" if delta else f"{stamp} p{page} {text[:300]}")

    def _watch(self, page: Any) -> None:
        number = id(page) % 1000

        def on_console(message: Any) -> None:
            self._note(number, f"console.{message.type}: {message.text}")

        def on_navigated(frame: Any) -> None:
            if frame == page.main_frame:
                self._note(number, f"at {frame.url}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self._note(number, f"pageerror: {error}"))
        page.on("framenavigated", on_navigated)

        def on_socket(socket: Any) -> None:
            socket.on("framesent", lambda payload: self._note(number, f"> {payload}"))
            socket.on("framereceived", lambda payload: self._note(number, f"< {payload}"))
            socket.on("close", lambda _socket: self._note(number, "socket closed"))

        page.on("websocket", on_socket)

    def dump(self) -> str:
        shown = self.lines[-self.LIMIT :]
        for page in self.context.pages:
            with contextlib.suppress(Exception):
                html = page.evaluate(_SHOWN_MESSAGES)
                status = page.text_content("#composer-status", timeout=1000)
                shown.append(f"-- messages of {page.url} (status {status!r}):\n{html}")
        return "\n".join(shown)


@pytest.fixture
def ui_context(ui_browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser profile (cookies, IndexedDB) for one test; a failed test's report
    shows what its pages did (``_Trace``)."""
    context = ui_browser.new_context(accept_downloads=True)
    request.node.browser_trace = _Trace(context)
    yield context
    context.close()
