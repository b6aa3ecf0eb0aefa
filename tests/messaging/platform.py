"""A loopback HTTP server that plays the Telegram Bot API and the Slack Web API.

The adapters' client libraries are pointed at it (``MESSAGING_TELEGRAM_API_BASE`` =
``<url>/bot``, ``MESSAGING_SLACK_API_BASE`` = ``<url>/api/``). Every call is recorded as a
:class:`Call` (method and parameters, JSON-decoded where the library JSON-encodes them);
answers come from per-method handlers, which a test may replace (``platform.answer``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

BOT_ID = 4242
BOT_USERNAME = "mate_bot"
SLACK_BOT_USER = "UBOT"


@dataclass
class Call:
    """One API call: ``platform`` ``telegram`` / ``slack``, ``method`` (``sendMessage``,
    ``chat.postMessage``), ``params``, and the token it came with."""

    platform: str
    method: str
    params: dict[str, Any]
    token: str


def _decode(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


class PlatformServer:
    """The fake platform APIs on 127.0.0.1 (a thread per request)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.updates: list[dict[str, Any]] = []
        self.refused_tokens: set[str] = set()
        self.handlers: dict[str, Callable[[Call], Any]] = {}
        self._lock = threading.Lock()
        self._message_id = 100
        server_self = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                status, body = server_self._dispatch(self.path, self.headers, raw)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> PlatformServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, handler: Callable[[Call], Any]) -> None:
        """Answer ``method`` with ``handler(call)`` (a result, or ``(status, body)``)."""
        self.handlers[method] = handler

    def of(self, method: str) -> list[Call]:
        """The calls of ``method`` so far."""
        with self._lock:
            return [c for c in self.calls if c.method == method]

    def wait_for(self, method: str, count: int = 1, timeout_s: float = 10.0) -> list[Call]:
        """The calls of ``method`` once there are ``count`` of them (else AssertionError)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            calls = self.of(method)
            if len(calls) >= count:
                return calls
            time.sleep(0.02)
        raise AssertionError(f"{count} calls of {method} expected, got {len(self.of(method))}")

    def _dispatch(self, path: str, headers: Any, raw: str) -> tuple[int, Any]:
        if path.startswith("/bot"):
            token, _, method = path[len("/bot") :].partition("/")
            params = {k: _decode(v) for k, v in parse_qsl(raw)}
            call = Call("telegram", method, params, token)
            return self._telegram(call)
        method, _, query = path[len("/api/") :].partition("?")
        if headers.get("Content-Type", "").startswith("application/json"):
            params = json.loads(raw or "{}")
        else:
            params = dict(parse_qsl(raw))
        params.update(parse_qsl(query))  # slack-sdk sends some methods' arguments here
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        return self._slack(Call("slack", method, params, token))

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def _telegram(self, call: Call) -> tuple[int, Any]:
        self._record(call)
        if call.token in self.refused_tokens:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        if call.method in self.handlers:
            return 200, {"ok": True, "result": self.handlers[call.method](call)}
        if call.method == "getMe":
            me = {"id": BOT_ID, "is_bot": True, "first_name": "Mate", "username": BOT_USERNAME}
            return 200, {"ok": True, "result": me}
        if call.method == "sendMessage":
            with self._lock:
                self._message_id += 1
                message_id = self._message_id
            message = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": call.params["chat_id"], "type": "private"},
                "text": call.params.get("text", ""),
            }
            return 200, {"ok": True, "result": message}
        if call.method == "getUpdates":
            # As Telegram: an offset confirms the updates before it; the rest come again.
            offset = call.params.get("offset")
            with self._lock:
                if isinstance(offset, int):
                    self.updates = [u for u in self.updates if u["update_id"] >= offset]
                updates = list(self.updates)
            if not updates:
                time.sleep(0.05)
            return 200, {"ok": True, "result": updates}
        return 200, {"ok": True, "result": True}

    def _slack(self, call: Call) -> tuple[int, Any]:
        self._record(call)
        if call.token in self.refused_tokens:
            return 200, {"ok": False, "error": "invalid_auth"}
        if call.method in self.handlers:
            return 200, {"ok": True, **self.handlers[call.method](call)}
        if call.method == "auth.test":
            return 200, {"ok": True, "user_id": SLACK_BOT_USER, "user": "mate", "team": "Team",
                         "team_id": "T1"}  # fmt: skip
        if call.method == "chat.postMessage":
            return 200, {"ok": True, "channel": call.params.get("channel"), "ts": str(time.time())}
        return 200, {"ok": True}
