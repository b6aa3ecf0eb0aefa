"""The benches' model: OpenAI's streaming wire format on loopback, answering instantly.

``tokens=N`` in the last message asks for N tokens, ``per_chunk=K`` for K tokens per SSE
event (default 1), ``gap_ms=G`` for a pause after each event (default none: events are
written 200 at a time). ``GET /v1/last`` answers the last completion request's body, so a
bench can send LiteLLM exactly what the server sent. Run it in its own process:
``serve_instant_model(port)`` blocks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


def serve_instant_model(port: int) -> None:
    """An OpenAI-format streaming server: ``tokens=N gap_ms=G`` in the prompt paces it."""
    from aiohttp import web

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        body: dict[str, Any] = {
            "id": "bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "instant",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            body["usage"] = usage
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    last: dict[str, Any] = {}

    async def last_request(request: web.Request) -> web.Response:
        return web.json_response(last)

    async def completions(request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        last.clear()
        last.update(payload)
        prompt = str(payload["messages"][-1].get("content") or "")
        settings = dict(part.split("=", 1) for part in prompt.split() if "=" in part)
        tokens, gap = int(settings.get("tokens", 3)), float(settings.get("gap_ms", 0)) / 1000
        per_chunk = int(settings.get("per_chunk", 1))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}))
        batch = []
        for n in range(0, tokens, per_chunk):
            text = "".join(f"t{k} " for k in range(n, min(n + per_chunk, tokens)))
            batch.append(chunk({"content": text}))
            if gap or len(batch) >= 200 or n + per_chunk >= tokens:
                await response.write(b"".join(batch))
                batch.clear()
                if gap:
                    await asyncio.sleep(gap)
        usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
        await response.write(chunk({}, "stop", usage) + b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/v1/last", last_request)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
