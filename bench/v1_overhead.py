"""What ``/v1/chat/completions`` adds to a streamed answer (docs/api.md §3).

Starts embedded PostgreSQL and Redis, a dev OpenBao, the instant loopback model
(``bench/instant_model.py``) and a real Daphne serving ``openmates.asgi:application``
with an instance (model pre- and post-processing off) and an instance key. Then, in
alternation, streams the same question through ``/v1`` (a new conversation each time)
and straight to the instant model through LiteLLM, to the first content chunk each.

Prints:
    v1_first_token_overhead_p50: … ms       /v1's first content SSE chunk at the client
                                            minus the same request made straight to the
                                            instant model (plain HTTP), paired
    litellm_first_token_overhead_p50: … ms  the same for LiteLLM called directly on the model
    v1_first_token_p50: … ms                /v1: request sent → first content chunk
    litellm_first_token_p50: … ms           LiteLLM acompletion(stream=True) → first chunk
    direct_first_token_p50: … ms            plain HTTP to the instant model → first chunk
    v1_stream_tokens_per_s: …               tokens per second of one long /v1 stream
    litellm_stream_tokens_per_s: …          the same stream read through LiteLLM directly
    direct_stream_tokens_per_s: …           the same stream read as plain SSE from the model

Usage: ``.venv/bin/python bench/v1_overhead.py [--samples 100] [--tokens 5000]``.
Loopback only; everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.instant_model import serve_instant_model
from bench.turn_overhead import _free_port, _start_daphne, _start_services

QUESTION = "Answer briefly tokens=3"


def _setup() -> str:
    """The bench instance and its /v1 key (returned)."""
    from django.contrib.auth.models import User

    from accounts.instance_keys import instance_key_create
    from instances.models import Instance
    from instances.services import instance_create

    owner = User.objects.create_user("bench-owner")
    instance = instance_create(slug="bench", name="Bench", owner=owner)
    Instance.objects.filter(pk=instance.pk).update(
        model_preprocessing_enabled=False,
        follow_ups_enabled=False,
        memory_enabled=False,
        api_requests_per_minute=1_000_000,
        api_tokens_per_day=10**12,
    )
    return instance_key_create(instance=instance, name="bench")[1]


async def _sse_stream(
    url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, list[float]]:
    """POST ``body`` for an SSE stream: seconds to the first content chunk and the arrival
    times of all content chunks (``"t…"`` tokens of the instant model)."""
    import httpx

    async with httpx.AsyncClient(timeout=60) as http:
        started = time.perf_counter()
        async with http.stream("POST", url, json=body, headers=headers) as response:
            arrivals = [
                time.perf_counter()
                async for line in response.aiter_lines()
                # /v1 writes compact JSON, the instant model a space after each colon.
                if line.startswith("data: {")
                and ('"content":"t' in line or '"content": "t' in line)
            ]
    if not arrivals:
        raise RuntimeError(f"the stream of {url} sent no content")
    return arrivals[0] - started, arrivals


async def _v1_stream(base: str, key: str, text: str) -> tuple[float, list[float]]:
    """The request through /v1 (a new conversation each time)."""
    body = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": text}]}
    return await _sse_stream(
        f"{base}/v1/chat/completions", body, {"Authorization": f"Bearer {key}"}
    )


async def _direct_stream(api_base: str, text: str) -> tuple[float, list[float]]:
    """The request made straight to the model (plain HTTP, no LiteLLM): the floor."""
    body = {"model": "instant", "stream": True, "messages": [{"role": "user", "content": text}]}
    return await _sse_stream(f"{api_base}/chat/completions", body, {})


async def _litellm_stream(api_base: str, text: str) -> tuple[float, list[float]]:
    import litellm  # noqa: TID251 (the bench measures LiteLLM itself)

    started = time.perf_counter()
    response = await litellm.acompletion(
        model="openai/instant",
        api_base=api_base,
        api_key="bench",
        messages=[{"role": "user", "content": text}],
        stream=True,
        num_retries=0,
    )
    arrivals = [
        time.perf_counter()
        async for chunk in response
        if chunk.choices and chunk.choices[0].delta.content
    ]
    return arrivals[0] - started, arrivals


def _rate(tokens: int, arrivals: list[float]) -> float:
    return tokens / max(arrivals[-1] - arrivals[0], 1e-9)


async def _measure(base: str, key: str, api_base: str, args: argparse.Namespace) -> None:
    v1, bare, direct = [], [], []
    for n in range(args.samples + 5):
        first_v1, _ = await _v1_stream(base, key, QUESTION)
        first_bare, _ = await _litellm_stream(api_base, QUESTION)
        first_direct, _ = await _direct_stream(api_base, QUESTION)
        if n >= 5:  # warm-up: connections, data keys, imports
            v1.append(first_v1 * 1000)
            bare.append(first_bare * 1000)
            direct.append(first_direct * 1000)

    def paired_p50(measured: list[float]) -> float:
        return statistics.median(a - b for a, b in zip(measured, direct, strict=True))

    long_text = f"Write a lot tokens={args.tokens}"
    _, v1_arrivals = await _v1_stream(base, key, long_text)
    _, bare_arrivals = await _litellm_stream(api_base, long_text)
    _, direct_arrivals = await _direct_stream(api_base, long_text)
    print(f"v1_first_token_overhead_p50: {paired_p50(v1):.2f} ms")
    print(f"litellm_first_token_overhead_p50: {paired_p50(bare):.2f} ms")
    print(f"v1_first_token_p50: {statistics.median(v1):.2f} ms")
    print(f"litellm_first_token_p50: {statistics.median(bare):.2f} ms")
    print(f"direct_first_token_p50: {statistics.median(direct):.2f} ms")
    print(f"v1_stream_tokens_per_s: {_rate(args.tokens, v1_arrivals):.0f}")
    print(f"litellm_stream_tokens_per_s: {_rate(args.tokens, bare_arrivals):.0f}")
    print(f"direct_stream_tokens_per_s: {_rate(args.tokens, direct_arrivals):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=5000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="openmates-bench-v1-"))
    model_port, server_port = _free_port(), _free_port()
    api_base = f"http://127.0.0.1:{model_port}/v1"
    model = multiprocessing.Process(target=serve_instant_model, args=(model_port,), daemon=True)
    model.start()
    services: list[Any] = []
    daphne = None
    try:
        services = _start_services(root, model_port)
        key = _setup()
        daphne = _start_daphne(server_port, root / "daphne.log", "openmates.asgi:application")
        asyncio.run(_measure(f"http://127.0.0.1:{server_port}", key, api_base, args))
    finally:
        if daphne is not None:
            daphne.terminate()
            daphne.wait(timeout=10)
        for service in services:
            service.stop()
        model.terminate()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
