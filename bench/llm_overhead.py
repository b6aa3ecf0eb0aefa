"""What the LLM gateway adds to a model call (docs/architecture.md §10).

Runs ≥ 1,000 calls through ``openmates.llm`` to a model that answers instantly (a LiteLLM
``CustomLLM`` registered as ``instant/echo``), and the same calls on LiteLLM directly,
alternating call by call so both see the same machine state. The AI call log is on and
writes to a throw-away embedded PostgreSQL, as in production.

Prints (budget: ``gateway_overhead_p50`` ≤ ``litellm_bare_p50`` + 1 ms):

    gateway_overhead_p50: … ms      one complete() through the gateway
    gateway_overhead_p99: … ms
    litellm_bare_p50: … ms          the same acompletion() on LiteLLM
    litellm_bare_p99: … ms
    gateway_added_p50: … ms         median of (gateway - bare) over paired calls
    gateway_stream_p50: … ms        one stream() to its Finish, and the bare twin
    litellm_bare_stream_p50: … ms
    llm_stream_tokens_per_s: …      a long answer, one token per chunk, through stream()
    litellm_bare_stream_tokens_per_s: …   the same stream on LiteLLM directly

The streaming-throughput pair talks to an OpenAI-compatible server on loopback (in its
own process, answering instantly) through LiteLLM's ``openai/`` provider, as a turn does;
the rate is tokens over the time from the first to the last text chunk (best of
``--stream-rounds``).

Usage: ``.venv/bin/python bench/llm_overhead.py [--calls 2000] [--stream-tokens 20000]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.instant_model import serve_instant_model

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2?"},
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_database(root: Path) -> Any:
    from openmates.runlocal.postgres import EmbeddedPostgres

    postgres = EmbeddedPostgres(root / "postgres")
    os.environ["DATABASE_URL"] = postgres.start()
    os.environ["OPENMATES_DATA_DIR"] = str(root / "var")
    return postgres


def _setup_django() -> None:
    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
    django.setup()
    call_command("migrate", verbosity=0)


def _register_instant_model() -> Any:
    # The bench measures LiteLLM itself, so it talks to it directly as well.
    import litellm  # noqa: TID251
    from litellm import CustomLLM  # noqa: TID251
    from litellm.types.utils import Usage  # noqa: TID251

    class Instant(CustomLLM):
        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            response = kwargs["model_response"]
            response.choices[0].message.content = "4"
            response.usage = Usage(prompt_tokens=20, completion_tokens=1, total_tokens=21)
            return response

        async def astreaming(self, *args: Any, **kwargs: Any) -> Any:
            usage = {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}
            yield {"text": "4", "is_finished": False, "finish_reason": "", "usage": None,
                   "index": 0, "tool_use": None}  # fmt: skip
            yield {"text": "", "is_finished": True, "finish_reason": "stop", "index": 0,
                   "tool_use": None, "usage": usage}  # fmt: skip

    litellm.custom_provider_map = [{"provider": "instant", "custom_handler": Instant()}]
    return litellm


def _start_model_server() -> tuple[multiprocessing.Process, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = multiprocessing.Process(target=serve_instant_model, args=(port,), daemon=True)
    process.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the loopback model server did not start")


async def _stream_rates(api_base: str, tokens: int, rounds: int) -> dict[str, float]:
    """Tokens per second of one long stream, through the gateway and on LiteLLM bare."""
    from django.conf import settings

    from openmates import llm

    lib = await llm._alitellm()
    settings.LLM_DEFAULT_TIERS = {
        **settings.LLM_DEFAULT_TIERS,
        "standard": [{"model": "openai/instant", "api_base": api_base}],
    }
    messages = [{"role": "user", "content": f"Write a lot tokens={tokens}"}]
    expected = "".join(f"t{n} " for n in range(tokens))

    async def gateway() -> float:
        arrivals, text = [], []
        async for event in llm.stream(tier="standard", messages=messages, stage="bench"):
            if isinstance(event, llm.TextDelta):
                arrivals.append(time.perf_counter())
                text.append(event.text)
        assert "".join(text) == expected, "the gateway changed the streamed text"
        return tokens / max(arrivals[-1] - arrivals[0], 1e-9)

    async def bare() -> float:
        response = await lib.acompletion(
            model="openai/instant",
            api_base=api_base,
            api_key="no-key",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            num_retries=0,
        )
        arrivals = [
            time.perf_counter()
            async for chunk in response
            if chunk.choices and chunk.choices[0].delta.content
        ]
        return tokens / max(arrivals[-1] - arrivals[0], 1e-9)

    rates: dict[str, list[float]] = {"g": [], "b": []}
    for _ in range(rounds):
        rates["g"].append(await gateway())
        rates["b"].append(await bare())
    return {
        "llm_stream_tokens_per_s": max(rates["g"]),
        "litellm_bare_stream_tokens_per_s": max(rates["b"]),
    }


async def _timed(call: Callable[[], Awaitable[Any]], count: int, into: list[float]) -> None:
    for _ in range(count):
        started = time.perf_counter()
        await call()
        into.append((time.perf_counter() - started) * 1000.0)


async def _measure(calls: int) -> dict[str, float]:
    from django.conf import settings

    from openmates import llm

    lib = _register_instant_model()
    settings.LLM_DEFAULT_TIERS = {"fast": [{"model": "instant/echo"}]}
    bare_request = {
        "model": "instant/echo",
        "messages": MESSAGES,
        "api_key": "no-key",
        "timeout": settings.LLM_TIMEOUT_S,
        "num_retries": 0,
    }

    async def gateway() -> None:
        await llm.complete(tier="fast", messages=MESSAGES, stage="bench")

    async def bare() -> None:
        await lib.acompletion(**bare_request)

    async def gateway_stream() -> None:
        async for _ in llm.stream(tier="fast", messages=MESSAGES, stage="bench"):
            pass

    async def bare_stream() -> None:
        response = await lib.acompletion(
            **bare_request, stream=True, stream_options={"include_usage": True}
        )
        async for _ in response:
            pass

    samples: dict[str, list[float]] = {"g": [], "b": [], "gs": [], "bs": []}
    for call in (gateway, bare, gateway_stream, bare_stream):
        await _timed(call, 200, [])  # warm-up
    # Alternate single calls (and which goes first) so both see the same machine state.
    for n in range(calls):
        pair = ((gateway, "g"), (bare, "b")) if n % 2 else ((bare, "b"), (gateway, "g"))
        for call, name in pair:
            await _timed(call, 1, samples[name])
        if n % 4 == 0:
            await _timed(gateway_stream, 1, samples["gs"])
            await _timed(bare_stream, 1, samples["bs"])
    assert await llm.aflush_call_log(timeout_s=60)
    added = [g - b for g, b in zip(samples["g"], samples["b"], strict=True)]
    return {
        "gateway_overhead_p50": statistics.median(samples["g"]),
        "gateway_overhead_p99": _percentile(samples["g"], 0.99),
        "litellm_bare_p50": statistics.median(samples["b"]),
        "litellm_bare_p99": _percentile(samples["b"], 0.99),
        "gateway_added_p50": statistics.median(added),
        "gateway_stream_p50": statistics.median(samples["gs"]),
        "litellm_bare_stream_p50": statistics.median(samples["bs"]),
    }


async def _measure_all(
    calls: int, api_base: str, tokens: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    figures = await _measure(max(1000, calls))
    rates = await _stream_rates(api_base, max(1, tokens), max(1, rounds))
    return figures, rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per variant (≥ 1000)")
    parser.add_argument(
        "--stream-tokens", type=int, default=20_000, help="tokens in the long answer"
    )
    parser.add_argument("--stream-rounds", type=int, default=3, help="long answers per variant")
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="openmates-bench-llm-"))
    model, api_base = _start_model_server()
    postgres = _start_database(root)
    try:
        _setup_django()
        figures, rates = asyncio.run(
            _measure_all(options.calls, api_base, options.stream_tokens, options.stream_rounds)
        )
        from openmates.models import AICall

        logged = AICall.objects.filter(stage="bench").count()
    finally:
        model.terminate()
        postgres.destroy()
        shutil.rmtree(root, ignore_errors=True)
    for name, value in figures.items():
        print(f"{name}: {value:.3f} ms")
    for name, rate in rates.items():
        print(f"{name}: {rate:,.0f}")
    print(f"ai_calls_logged: {logged} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
