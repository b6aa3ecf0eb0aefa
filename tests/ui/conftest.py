"""Browser tests against a live Daphne serving OpenMates on the test database.

``asgi_server`` starts ``daphne openmates.asgi:application`` (static files through
WhiteNoise, as in production) in a subprocess on a free loopback port, with the test
session's PostgreSQL (the test database), Redis and OpenBao, and the model tiers pointed
at ``ui_llm`` (a loopback OpenAI-compatible server the test scripts). Tests use
``transactional_db`` so what they create is committed and visible to the server process.
``ui_browser`` is headless Debian Chromium through Playwright's sync API.
"""

from __future__ import annotations

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
    extra_env: dict[str, str], log_dir: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run Daphne on the test database with ``extra_env``; yields ``(base URL, process)``.

    The process may be killed by the test; it is stopped on exit if still running.
    """
    from django.db import connection

    port = _free_port()
    env = dict(os.environ)
    env["DATABASE_URL"] = _test_database_url(connection.settings_dict["NAME"])
    env["DJANGO_SETTINGS_MODULE"] = "openmates.settings"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra_env)
    log = log_dir / "daphne.log"
    with log.open("wb") as sink:
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


@pytest.fixture
def ui_context(ui_browser: Any) -> Iterator[Any]:
    """A fresh browser profile (cookies, IndexedDB) for one test."""
    context = ui_browser.new_context(accept_downloads=True)
    yield context
    context.close()
