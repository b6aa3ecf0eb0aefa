"""A loopback OpenAI-compatible model server for the browser tests.

The live app (a Daphne subprocess) reaches it through LiteLLM's ``openai/`` provider.
Streaming requests (the main answer) take the next queued :class:`Turn` — text pieces
sent ``gap_s`` apart, optionally preceded by a tool call — or a short default answer.
Non-streaming requests with a JSON schema (titles, follow-ups, safety scores) get an
object that fills the schema: strings, lists of strings, numbers; ``json_values`` sets
chosen properties (e.g. ``{"follow_ups": [...]}``). ``POST /search`` plays a slow web
search API (``search_delay_s``), so a tool call stays running long enough to cancel.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.llm_fake import chat_chunk

DEFAULT_ANSWER = ["Hello", " from", " the", " test", " model."]


@dataclass
class Turn:
    """One streamed answer: ``pieces`` of text, ``gap_s`` apart, after an optional tool call;
    with ``status`` other than 200, the provider refuses the request with that HTTP status."""

    pieces: list[str]
    gap_s: float = 0.02
    tool_call: dict[str, Any] | None = None
    status: int = 200


@dataclass
class _State:
    turns: list[Turn] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    json_values: dict[str, Any] = field(default_factory=dict)
    search_delay_s: float = 0.0


def _fill(schema: dict[str, Any], values: dict[str, Any], name: str = "") -> Any:
    if name in values:
        return values[name]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {key: _fill(sub, values, key) for key, sub in props.items()}
    if kind == "array":
        item = schema.get("items", {"type": "string"})
        return [_fill(item, values, name + "[]"), _fill(item, values, name + "[]")]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return f"test {name or 'value'}".strip()


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        schema = response_format.get("json_schema", {})
        return dict(schema.get("schema", schema))
    if response_format.get("type") == "json_object":
        return {"type": "object", "properties": {}}
    return None


class UIModelServer:
    """The server; ``queue(Turn(...))`` scripts the next streamed answer."""

    def __init__(self) -> None:
        self.state = _State()
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._whole(200, {"object": "list", "data": [{"id": "wire-model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/search"):
                    self._search(body)
                    return
                with owner.lock:
                    owner.state.requests.append(body)
                schema = _schema_of(body)
                if body.get("stream"):
                    with owner.lock:
                        turn = owner.state.turns.pop(0) if owner.state.turns else None
                    if schema is not None and turn is None:
                        text = json.dumps(_fill(schema, owner.state.json_values))
                        turn = Turn(pieces=[text], gap_s=0)
                    self._stream(turn or Turn(pieces=DEFAULT_ANSWER))
                    return
                text = (
                    json.dumps(_fill(schema, owner.state.json_values))
                    if schema is not None
                    else "".join(DEFAULT_ANSWER)
                )
                self._whole(200, _completion(text))

            def _search(self, body: dict[str, Any]) -> None:
                time.sleep(owner.state.search_delay_s)
                result = {"title": "OpenMates", "url": "https://example.org", "content": "news"}
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    # Broken when the tool call was cancelled meanwhile.
                    self._whole(200, {"query": body.get("query"), "results": [result]})

            def _whole(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _event(self, chunk: dict[str, Any]) -> None:
                data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _stream(self, turn: Turn) -> None:
                if turn.status != 200:
                    error = {
                        "message": "refused by the scripted provider",
                        "type": "invalid_request_error",
                    }
                    self._whole(turn.status, {"error": error})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    if turn.tool_call is not None:
                        call = {
                            "index": 0,
                            "id": turn.tool_call.get("id", "call_ui_1"),
                            "type": "function",
                            "function": {
                                "name": turn.tool_call["name"],
                                "arguments": json.dumps(turn.tool_call.get("arguments", {})),
                            },
                        }
                        self._event(chat_chunk(tool_calls=[call]))
                        self._event(chat_chunk(finish_reason="tool_calls"))
                    else:
                        for piece in turn.pieces:
                            self._event(chat_chunk(content=piece))
                            time.sleep(turn.gap_s)
                        self._event(chat_chunk(finish_reason="stop"))
                        self._event(chat_chunk(usage=(10, len(turn.pieces))))
                    done = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the app cancelled the stream
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> UIModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        with self.lock:
            self.state = _State()

    def queue(self, *turns: Turn) -> None:
        with self.lock:
            self.state.turns.extend(turns)

    def set_search_delay(self, seconds: float) -> None:
        with self.lock:
            self.state.search_delay_s = seconds

    def set_json(self, **values: Any) -> None:
        with self.lock:
            self.state.json_values.update(values)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.state.requests)


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-ui",
        "object": "chat.completion",
        "created": 1,
        "model": "wire-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
