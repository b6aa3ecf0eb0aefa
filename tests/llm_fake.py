"""Test doubles for the LLM gateway, at the LiteLLM boundary.

* :class:`ScriptedProvider` is a LiteLLM ``CustomLLM`` registered under the provider name
  ``scripted`` (``litellm.custom_provider_map``), so a call to ``scripted/<name>`` runs
  through LiteLLM's real code (its stream wrapper, response types, exception mapping).
  A test queues :class:`Reply` values; each call takes the first reply whose ``model``
  matches (or any model when ``model`` is None) and records what the gateway sent.
* :class:`SSEServer` is a loopback HTTP server speaking OpenAI's wire format
  (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``) for byte-level
  cases a ``CustomLLM`` cannot express: the test gives the raw body pieces, each sent as
  its own network write.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import litellm
from litellm import CustomLLM
from litellm.types.utils import (
    ChatCompletionMessageToolCall,
    Choices,
    EmbeddingResponse,
    Function,
    Message,
    ModelResponse,
)
from litellm.types.utils import Usage as LiteLLMUsage

PROVIDER = "scripted"


@dataclass
class Reply:
    """What one scripted call answers.

    ``text`` is streamed as the given pieces (a str is one piece). ``tool_calls`` are
    complete calls ``{"id", "name", "arguments"}`` (arguments as a str or a dict), each
    streamed as one fragment at its own index; ``tool_fragments`` are raw stream
    fragments ``{"index", "id", "name", "arguments"}`` for the awkward cases.
    ``error`` (an HTTP status; 599 a refused connection, 408 LiteLLM's ``Timeout``, 413
    its ``ContextWindowExceededError``) is raised before anything is sent; with
    ``error_after`` it is raised after that many chunks. ``finish_reason=None`` ends the
    stream without a finish. ``delay_s`` is waited before every chunk.
    """

    text: str | list[str] = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_fragments: list[dict[str, Any]] = field(default_factory=list)
    usage: tuple[int, int] | None = (12, 7)
    finish_reason: str | None = "stop"
    error: int | None = None
    error_message: str = "scripted failure"
    error_after: int | None = None
    delay_s: float = 0.0
    model: str | None = None
    embedding: list[list[float]] | None = None

    def pieces(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)


@dataclass
class Request:
    """What the gateway sent on one scripted call."""

    model: str
    messages: list[dict[str, Any]]
    api_key: str | None
    api_base: str | None
    params: dict[str, Any]
    stream: bool
    input: list[str] | None = None


class UnscriptedCallError(AssertionError):
    """A model was called that no test scripted."""


def _error(status: int, message: str, model: str) -> Exception:
    kwargs = {"message": message, "llm_provider": PROVIDER, "model": model}
    if status == 429:
        return litellm.RateLimitError(**kwargs)
    if status == 401:
        return litellm.AuthenticationError(**kwargs)
    if status == 400:
        return litellm.BadRequestError(**kwargs)
    if status == 503:
        return litellm.ServiceUnavailableError(**kwargs)
    if status == 599:  # stands for "the connection failed"
        return litellm.APIConnectionError(**kwargs)
    if status == 408:
        return litellm.Timeout(**kwargs)
    if status == 413:  # stands for "the prompt exceeds the context window"
        return litellm.ContextWindowExceededError(**kwargs)
    return litellm.InternalServerError(**kwargs)


class ScriptedProvider(CustomLLM):
    """The ``scripted`` provider: answers from queued :class:`Reply` values."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[Reply] = []
        self.requests: list[Request] = []
        self.unscripted: list[str] = []
        self._lock = threading.Lock()

    # --- scripting ---

    def reply(self, **kwargs: Any) -> Reply:
        """Queue one :class:`Reply` (keyword arguments as its fields) and return it."""
        reply = Reply(**kwargs)
        with self._lock:
            self.replies.append(reply)
        return reply

    def reset(self) -> None:
        with self._lock:
            self.replies.clear()
            self.requests.clear()
            self.unscripted.clear()

    def _take(self, model: str, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            for position, reply in enumerate(self.replies):
                if reply.model is None or reply.model == model:
                    return self.replies.pop(position)
            self.unscripted.append(model)
        raise UnscriptedCallError(f"unscripted call to {PROVIDER}/{model}")

    @staticmethod
    def _request(kwargs: dict[str, Any], *, stream: bool) -> Request:
        params = dict(kwargs.get("optional_params") or {})
        return Request(
            model=kwargs["model"],
            messages=list(kwargs.get("messages") or []),
            api_key=kwargs.get("api_key"),
            api_base=kwargs.get("api_base"),
            params=params,
            stream=stream,
        )

    # --- LiteLLM's CustomLLM interface ---

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        model = kwargs["model"]
        reply = self._take(model, self._request(kwargs, stream=False))
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.error is not None:
            raise _error(reply.error, reply.error_message, model)
        calls = [
            ChatCompletionMessageToolCall(
                id=call.get("id"),
                type="function",
                function=Function(name=call["name"], arguments=_arguments(call)),
            )
            for call in reply.tool_calls
        ]
        response: ModelResponse = kwargs["model_response"]
        response.model = model
        response.choices = [
            Choices(
                index=0,
                finish_reason=reply.finish_reason or "stop",
                message=Message(
                    role="assistant",
                    content="".join(reply.pieces()) or None,
                    tool_calls=calls or None,
                ),
            )
        ]
        if reply.usage is not None:
            prompt, completion = reply.usage
            response.usage = LiteLLMUsage(
                prompt_tokens=prompt,
                completion_tokens=completion,
                total_tokens=prompt + completion,
            )
        return response

    async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        model = kwargs["model"]
        reply = self._take(model, self._request(kwargs, stream=True))
        if reply.error is not None and reply.error_after is None:
            raise _error(reply.error, reply.error_message, model)
        chunks = [_chunk(text=piece) for piece in reply.pieces() if piece]
        fragments = list(reply.tool_fragments) + [
            {"index": n, "id": c.get("id"), "name": c["name"], "arguments": _arguments(c)}
            for n, c in enumerate(reply.tool_calls)
        ]
        chunks += [_chunk(tool_use=_tool_use(f)) for f in fragments]
        for sent, chunk in enumerate(chunks):
            if reply.error is not None and sent == reply.error_after:
                raise _error(reply.error, reply.error_message, model)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            yield chunk
        if reply.error is not None:
            raise _error(reply.error, reply.error_message, model)
        if reply.finish_reason is not None:
            usage = None
            if reply.usage is not None:
                prompt, completion = reply.usage
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                }
            yield _chunk(finish_reason=reply.finish_reason, usage=usage)

    async def aembedding(self, *args: Any, **kwargs: Any) -> EmbeddingResponse:
        model = kwargs["model"]
        request = self._request(kwargs, stream=False)
        request.input = list(kwargs.get("input") or [])
        reply = self._take(model, request)
        if reply.error is not None:
            raise _error(reply.error, reply.error_message, model)
        response: EmbeddingResponse = kwargs["model_response"]
        response.model = model
        response.data = [
            {"object": "embedding", "index": n, "embedding": vector}
            for n, vector in enumerate(reply.embedding or [])
        ]
        prompt = reply.usage[0] if reply.usage else 0
        response.usage = LiteLLMUsage(
            prompt_tokens=prompt, completion_tokens=0, total_tokens=prompt
        )
        return response


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments", "")
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _tool_use(fragment: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": fragment.get("id"),
        "type": "function",
        "function": {"name": fragment.get("name"), "arguments": fragment.get("arguments", "")},
        "index": fragment.get("index", 0),
    }


def _chunk(
    *,
    text: str = "",
    tool_use: dict[str, Any] | None = None,
    finish_reason: str = "",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "text": text,
        "tool_use": tool_use,
        "is_finished": bool(finish_reason),
        "finish_reason": finish_reason,
        "usage": usage,
        "index": 0,
    }


_provider: ScriptedProvider | None = None


def scripted_provider() -> ScriptedProvider:
    """The process-wide scripted provider, registered with LiteLLM on first use."""
    global _provider
    if _provider is None:
        _provider = ScriptedProvider()
        litellm.custom_provider_map = [
            *[p for p in litellm.custom_provider_map if p["provider"] != PROVIDER],
            {"provider": PROVIDER, "custom_handler": _provider},
        ]
    return _provider


# --- the loopback SSE server -------------------------------------------------------------


@dataclass
class WireReply:
    """One scripted HTTP answer: ``status``, then ``pieces`` (bytes), each written and
    flushed on its own with ``gap_s`` between them. ``close_early`` drops the connection
    after the pieces without ending the chunked body (a cut stream).
    """

    pieces: list[bytes]
    status: int = 200
    content_type: str = "text/event-stream"
    gap_s: float = 0.002
    close_early: bool = False


def sse_body(events: list[dict[str, Any]], *, done: bool = True) -> bytes:
    """The SSE body for OpenAI-format chunk objects (``data: …`` lines, then ``[DONE]``)."""
    body = b"".join(
        b"data: " + json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
        for e in events
    )
    return body + (b"data: [DONE]\n\n" if done else b"")


def chat_chunk(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """An OpenAI ``chat.completion.chunk`` object."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    chunk: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        chunk["choices"] = []
        chunk["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return chunk


class SSEServer:
    """A loopback OpenAI-compatible server answering from queued :class:`WireReply`."""

    def __init__(self) -> None:
        self.replies: list[WireReply] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                body = json.dumps({"object": "list", "data": [{"id": "wire-model"}]}).encode()
                self._send_whole(200, "application/json", body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "body": payload})
                    reply = server.replies.pop(0) if server.replies else None
                if reply is None:
                    self._send_whole(500, "application/json", b'{"error": "unscripted"}')
                    return
                if reply.content_type != "text/event-stream":
                    self._send_whole(reply.status, reply.content_type, b"".join(reply.pieces))
                    return
                self._send_chunked(reply)

            def _send_whole(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _send_chunked(self, reply: WireReply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                for piece in reply.pieces:
                    if not piece:
                        continue
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    time.sleep(reply.gap_s)
                if not reply.close_early:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # concurrent test calls must not overflow the backlog

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> SSEServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        with self._lock:
            self.replies.clear()
            self.requests.clear()

    def queue(self, *replies: WireReply) -> None:
        with self._lock:
            self.replies.extend(replies)


class TierMapOnly:
    """What the gateway reads of an instance: its tier map and id (no app model needed)."""

    pk = 7
    embedding_model = None
    embedding_dimensions = None

    def __init__(self, tier_map: dict[str, Any]) -> None:
        self.tier_map = tier_map
