"""Fixtures for the chats tests: an instance, users with transit keys, a browser page.

Registered in ``tests/conftest.py``'s ``pytest_plugins``.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def _user_key(user_id: int) -> None:
    from openmates import vault

    vault.ensure_key(vault.user_key_name(user_id))


def _shred(user_id: int) -> None:
    from chats import cache
    from openmates import crypto, vault

    cache.prune(user_id=user_id)
    vault.delete_key(vault.user_key_name(user_id))
    crypto.forget_key(vault.user_key_name(user_id))


@pytest.fixture
def chat_instance(db: Any) -> Any:
    """An instance chats can belong to (created directly: no seeding needed here)."""
    from instances.models import Instance

    return Instance.objects.create(slug=f"chats-{secrets.token_hex(4)}", name="Chats test")


@pytest.fixture
def keyed_owner(owner: Any) -> Iterator[Any]:
    """The ``owner`` user with a transit key; its caches and key are removed afterwards."""
    _user_key(owner.pk)
    yield owner
    _shred(owner.pk)


@pytest.fixture
def cache_user_id() -> Iterator[int]:
    """A fresh user id with a transit key, for cache tests that need no database row."""
    user_id = 10_000_000 + secrets.randbelow(80_000_000)
    _user_key(user_id)
    yield user_id
    _shred(user_id)


class _StaticHandler(BaseHTTPRequestHandler):
    """Serves an empty page (strict CSP, no inline script) and files under ``static/``."""

    def do_GET(self) -> None:
        if self.path in ("/", "/index.html"):
            body = (
                b'<!doctype html><html><head><meta charset="utf-8"><title>t</title></head></html>'
            )
            self._send(200, "text/html; charset=utf-8", body)
            return
        if self.path.startswith("/static/"):
            target = (STATIC_DIR / self.path[len("/static/") :]).resolve()
            if target.is_file() and STATIC_DIR in target.parents:
                kind = "text/javascript" if target.suffix in (".js", ".mjs") else "text/plain"
                self._send(200, kind, target.read_bytes())
                return
        self._send(404, "text/plain", b"not found")

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def static_origin() -> Iterator[str]:
    """A loopback HTTP origin serving ``static/`` (127.0.0.1 is a secure context)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StaticHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _BrowserThread:
    """Playwright's sync API on a thread of its own.

    Its event loop would otherwise count as running in the test's thread, and Django then
    refuses ORM calls there (``SynchronousOnlyOperation``). Every Playwright object is
    created and used on this one thread through :meth:`call`.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self.browser: Any = None
        self._playwright: Any = None
        self.call(self._start)

    def _start(self) -> None:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )

    def call(self, fn: Callable[[], Any]) -> Any:
        return self._pool.submit(fn).result(timeout=120)

    def close(self) -> None:
        def stop() -> None:
            self.browser.close()
            self._playwright.stop()

        self.call(stop)
        self._pool.shutdown()


@pytest.fixture(scope="module")
def chromium() -> Iterator[_BrowserThread]:
    """Headless Debian Chromium through Playwright (one per test module, own thread)."""
    browser = _BrowserThread()
    yield browser
    browser.close()


class CryptoPage:
    """A page with ``static/js/crypto.js`` importable; ``run`` evaluates a function body.

    The body sees ``c`` (the module, imported once per page, so ``c.keyring`` keeps its
    keys across calls) and ``args``; a thrown ``CryptoError`` becomes ``{"error": code}``.
    """

    def __init__(self, thread: _BrowserThread, page: Any) -> None:
        self.thread = thread
        self.page = page

    def run(self, body: str, args: Any = None) -> Any:
        script = (
            "async (args) => { const c = await import('/static/js/crypto.js');"
            " try { " + body + " } catch (e) {"
            " if (e && e.name === 'CryptoError') return {error: e.code}; throw e; } }"
        )
        return self.thread.call(lambda: self.page.evaluate(script, args))


@pytest.fixture
def crypto_page(chromium: _BrowserThread, static_origin: str) -> Iterator[CryptoPage]:
    """A fresh browser context on the static origin, as a :class:`CryptoPage`."""

    def open_page() -> tuple[Any, Any]:
        context = chromium.browser.new_context()
        page = context.new_page()
        page.goto(static_origin + "/")
        return context, page

    context, page = chromium.call(open_page)
    yield CryptoPage(chromium, page)
    chromium.call(context.close)
