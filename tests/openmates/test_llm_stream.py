"""Stream normalisation through the gateway: what providers do, what callers get.

Byte-level and wire-format cases go through the loopback SSE server and LiteLLM's
``openai/`` provider; the rest through the scripted ``CustomLLM`` provider.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from openmates import llm
from openmates.llm_stream import (
    Finish,
    StreamError,
    StreamNormaliser,
    TextDelta,
    ToolCall,
    Usage,
)
from tests.llm_fake import WireReply, chat_chunk, sse_body

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]


async def collect(**kwargs: Any) -> list[Any]:
    kwargs.setdefault("tier", "standard")
    kwargs.setdefault("messages", USER)
    return [event async for event in llm.stream(**kwargs)]


@pytest.fixture
def wire_tier(settings: Any, llm_wire: Any) -> Any:
    """The standard tier served by the loopback server through LiteLLM's openai/ provider."""
    settings.LLM_DEFAULT_TIERS = {
        "standard": [{"model": "openai/wire-model", "api_base": llm_wire.api_base}]
    }
    settings.LLM_RETRIES = 0
    return llm_wire


def tool_delta(index: int, call_id: str | None, name: str | None, arguments: str) -> dict:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return fragment


async def test_multibyte_text_split_at_every_byte_offset_arrives_unchanged(wire_tier: Any) -> None:
    text = "你好世界🌍"
    body = sse_body([chat_chunk(content=text, finish_reason="stop"), chat_chunk(usage=(5, 6))])
    expected = [TextDelta(text), Usage(5, 6), Finish("stop", "openai/wire-model")]
    offsets = range(1, len(body))
    for batch_start in range(1, len(body), 16):
        batch = [o for o in offsets if batch_start <= o < batch_start + 16]
        wire_tier.queue(*[WireReply([body[:o], body[o:]], gap_s=0.001) for o in batch])
        results = await asyncio.gather(*[collect() for _ in batch])
        for offset, events in zip(batch, results, strict=True):
            assert events == expected, f"split at byte {offset}"
    assert len(wire_tier.requests) == len(body) - 1


async def test_text_sent_one_byte_per_network_write_arrives_unchanged(wire_tier: Any) -> None:
    text = "Grüße, 你好世界🌍!"
    body = sse_body([chat_chunk(content=text, finish_reason="stop"), chat_chunk(usage=(2, 9))])
    wire_tier.queue(WireReply([body[i : i + 1] for i in range(len(body))], gap_s=0.0))

    events = await collect()

    assert events == [TextDelta(text), Usage(2, 9), Finish("stop", "openai/wire-model")]


async def test_parallel_tool_calls_all_at_index_zero_come_out_as_separate_calls(
    wire_tier: Any,
) -> None:
    body = sse_body(
        [
            chat_chunk(tool_calls=[tool_delta(0, "c1", "calc", '{"expr": ')]),
            chat_chunk(tool_calls=[tool_delta(0, None, None, '"1+1"}')]),
            chat_chunk(tool_calls=[tool_delta(0, "c2", "calc", '{"ex')]),
            chat_chunk(tool_calls=[tool_delta(0, None, None, 'pr": "2*3"}')]),
            chat_chunk(finish_reason="tool_calls"),
            chat_chunk(usage=(30, 12)),
        ]
    )
    wire_tier.queue(WireReply([body]))

    events = await collect(tools=TOOLS)

    assert events == [
        ToolCall("c1", "calc", {"expr": "1+1"}),
        ToolCall("c2", "calc", {"expr": "2*3"}),
        Usage(30, 12),
        Finish("tool_calls", "openai/wire-model"),
    ]
    assert wire_tier.requests[0]["body"]["tools"] == TOOLS


async def test_arguments_in_many_fragments_are_joined(wire_tier: Any) -> None:
    pieces = ['{"', "expr", '": "', "12", " * ", "7", '"', "}"]
    body = sse_body(
        [chat_chunk(tool_calls=[tool_delta(0, "call_9", "calc", "")])]
        + [chat_chunk(tool_calls=[tool_delta(0, None, None, p)]) for p in pieces]
        + [chat_chunk(finish_reason="tool_calls"), chat_chunk(usage=(20, 9))]
    )
    wire_tier.queue(WireReply([body]))

    events = await collect(tools=TOOLS)

    assert events == [
        ToolCall("call_9", "calc", {"expr": "12 * 7"}),
        Usage(20, 9),
        Finish("tool_calls", "openai/wire-model"),
    ]


async def test_empty_argument_string_means_no_arguments(llm_script: Any) -> None:
    llm_script.reply(tool_calls=[{"id": "t1", "name": "datetime_now", "arguments": ""}])

    events = await collect(tools=TOOLS)

    assert events == [
        ToolCall("t1", "datetime_now", {}),
        Usage(12, 7),
        Finish("tool_calls", "scripted/standard"),
    ]


async def test_text_and_tool_call_in_one_delta_both_arrive(wire_tier: Any) -> None:
    body = sse_body(
        [
            {
                **chat_chunk(),
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "content": "Let me calculate.",
                            "tool_calls": [tool_delta(0, "c7", "calc", '{"expr": "3-1"}')],
                        },
                        "finish_reason": None,
                    }
                ],
            },
            chat_chunk(finish_reason="tool_calls"),
            chat_chunk(usage=(9, 4)),
        ]
    )
    wire_tier.queue(WireReply([body]))

    events = await collect(tools=TOOLS)

    assert events == [
        TextDelta("Let me calculate."),
        ToolCall("c7", "calc", {"expr": "3-1"}),
        Usage(9, 4),
        Finish("tool_calls", "openai/wire-model"),
    ]


async def test_finish_reason_stop_after_streamed_tool_calls_reports_tool_calls(
    wire_tier: Any,
) -> None:
    body = sse_body(
        [
            chat_chunk(tool_calls=[tool_delta(0, "c1", "calc", '{"expr": "1"}')]),
            chat_chunk(finish_reason="stop"),
            chat_chunk(usage=(8, 3)),
        ]
    )
    wire_tier.queue(WireReply([body]))

    events = await collect(tools=TOOLS)

    assert events == [
        ToolCall("c1", "calc", {"expr": "1"}),
        Usage(8, 3),
        Finish("tool_calls", "openai/wire-model"),
    ]


async def test_connection_cut_inside_tool_arguments_gives_an_error_and_no_call(
    wire_tier: Any,
) -> None:
    body = sse_body(
        [
            chat_chunk(content="Checking."),
            chat_chunk(tool_calls=[tool_delta(0, "c1", "calc", '{"expr": "1')]),
        ],
        done=False,
    )
    wire_tier.queue(WireReply([body], close_early=True))

    events = await collect(tools=TOOLS)

    assert events == [
        TextDelta("Checking."),
        StreamError("connection_error", "The model provider could not be reached.", True),
    ]


async def test_stream_ending_inside_tool_arguments_gives_stream_cut(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(
        text="One moment.",
        tool_fragments=[{"index": 0, "id": "c1", "name": "calc", "arguments": '{"expr": "2+'}],
        finish_reason=None,
    )

    events = await collect(tools=TOOLS)

    assert events == [
        TextDelta("One moment."),
        StreamError("stream_cut", "The model's answer ended in the middle of a tool call.", True),
    ]


async def test_invalid_tool_arguments_after_a_finish_are_never_reported(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(
        text="Sure.",
        tool_fragments=[{"index": 0, "id": "c1", "name": "calc", "arguments": '{"expr": 2+'}],
    )

    events = await collect(tools=TOOLS)

    assert events == [
        TextDelta("Sure."),
        StreamError("stream_cut", "The model's answer ended in the middle of a tool call.", True),
    ]


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (["Sure. <tool_call>", '{"name": "calc"}', "</tool_call> Done."], "Sure.  Done."),
        (["Sure. <tool", '_call>{"name": "calc", "arguments": {}}</tool_', "call>"], "Sure. "),
        (["Result", "[TOOL_CALLS]", '[{"name": "calc"}]'], "Result"),
        (["x <function=calc>", '{"expr": "1"}</function> y'], "x  y"),
        (["a < b and <tool", "s> are fine"], "a < b and <tools> are fine"),
    ],
)
async def test_tool_call_markup_in_text_is_never_shown(
    llm_script: Any, pieces: list[str], shown: str
) -> None:
    llm_script.reply(text=pieces)

    events = await collect()

    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == shown
    assert events[-1] == Finish("stop", "scripted/standard")


async def test_an_answer_of_tool_call_markup_only_is_an_empty_response(llm_script: Any) -> None:
    llm_script.reply(text=["<|python_tag|>calc.call(expr='1')"])

    events = await collect()

    assert [e for e in events if isinstance(e, TextDelta)] == []
    assert events[-1] == StreamError("empty_response", "The model returned an empty answer.", False)


async def test_markup_split_over_many_chunks_is_held_back_not_shown(llm_script: Any) -> None:
    llm_script.reply(text=["ok ", "<", "tool", "_", "call", ">", "{}", "</tool_call>", "!"])

    events = await collect()

    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("ok "),
        TextDelta("!"),
    ]


async def test_an_unscripted_call_is_recorded_for_the_guard_to_fail_the_test(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0

    events = await collect(tier="heavy")

    assert len(events) == 1
    assert isinstance(events[0], StreamError)
    assert llm_script.unscripted == ["heavy"]
    llm_script.reset()  # this test wanted the call; any other test would now fail


async def test_a_long_answer_of_one_token_per_chunk_arrives_whole_and_in_order(
    wire_tier: Any,
) -> None:
    tokens = [f"t{n} " for n in range(2000)] + ["a < b ", "[x] ", "ok"]
    body = sse_body(
        [chat_chunk(content=t) for t in tokens]
        + [chat_chunk(content="", finish_reason="stop"), chat_chunk(usage=(5, len(tokens)))]
    )
    wire_tier.queue(WireReply([body]))

    events = await collect()

    text = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(text) == "".join(tokens)
    assert text[:3] == ["t0 ", "t1 ", "t2 "]  # shown as it comes, not held back
    assert events[-2:] == [Usage(5, len(tokens)), Finish("stop", "openai/wire-model")]


def _litellm_chunk(**delta: Any) -> Any:
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    finish = delta.pop("finish_reason", None)
    return ModelResponseStream(
        choices=[StreamingChoices(index=0, delta=Delta(**delta), finish_reason=finish)]
    )


def _plain_chunk(**delta: Any) -> Any:
    finish = delta.pop("finish_reason", None)
    calls = [
        SimpleNamespace(
            index=c["index"],
            id=c.get("id"),
            function=SimpleNamespace(
                name=c["function"].get("name"), arguments=c["function"]["arguments"]
            ),
        )
        for c in delta.pop("tool_calls", None) or []
    ]
    choice = SimpleNamespace(
        index=0, delta=SimpleNamespace(tool_calls=calls or None, **delta), finish_reason=finish
    )
    return SimpleNamespace(choices=[choice], usage=None)


@pytest.mark.parametrize("make_chunk", [_litellm_chunk, _plain_chunk])
def test_normaliser_reads_litellm_chunks_and_plain_objects_alike(make_chunk: Any) -> None:
    normaliser = StreamNormaliser()
    chunks = [
        make_chunk(content="Let me ", role="assistant"),
        make_chunk(content="check."),
        make_chunk(tool_calls=[tool_delta(0, "call_a", "calc", '{"expr": ')]),
        make_chunk(tool_calls=[tool_delta(0, None, None, '"1+1"}')]),
        make_chunk(content=None, finish_reason="tool_calls"),
    ]

    events = [event for chunk in chunks for event in normaliser.feed(chunk)]
    events += normaliser.finish("m")

    assert events == [
        TextDelta("Let me "),
        TextDelta("check."),
        ToolCall("call_a", "calc", {"expr": "1+1"}),
        Finish("tool_calls", "m"),
    ]


def test_the_gateways_litellm_import_leaves_the_import_heap_to_reference_counting() -> None:
    llm._import_litellm()

    assert gc.get_freeze_count() > 0


async def test_a_long_stream_leaves_no_async_generator_per_chunk_to_the_event_loop(
    wire_tier: Any,
) -> None:
    # LiteLLM restarted `async for` over the OpenAI SDK's stream for every chunk: one async
    # generator per chunk, each closed through the loop's finaliser hook (a self-pipe write
    # and a task), a sixth of the server's loop time with 200 streams.
    words = [f"w{n} " for n in range(300)]
    chunks = [chat_chunk(content=w) for w in words] + [chat_chunk(finish_reason="stop")]
    wire_tier.queue(WireReply([sse_body(chunks)], gap_s=0.0))
    finalized: list[Any] = []
    firstiter, finalizer = sys.get_asyncgen_hooks()

    def counting_finalizer(agen: Any) -> None:
        finalized.append(type(agen).__qualname__)
        assert finalizer is not None
        finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=counting_finalizer)
    try:
        events = await collect()
    finally:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "".join(words)
    assert isinstance(events[-1], Finish)
    assert len(finalized) < 10


# --- the OpenAI SDK client the gateway hands LiteLLM ---


def _count_parsing(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the chunks the gateway's client read, and how many went the SDK's own way."""
    import openai

    counts = {"read": 0, "sdk": 0}
    client_class: Any = llm._client_class
    assert client_class is not None
    ours = client_class._process_response_data
    sdks = openai.AsyncOpenAI._process_response_data

    def read(self: Any, **kwargs: Any) -> Any:
        counts["read"] += 1
        return ours(self, **kwargs)

    def sdk(self: Any, **kwargs: Any) -> Any:
        counts["sdk"] += 1
        return sdks(self, **kwargs)

    monkeypatch.setattr(client_class, "_process_response_data", read)
    monkeypatch.setattr(openai.AsyncOpenAI, "_process_response_data", sdk)
    return counts


async def test_streamed_chunks_are_read_through_the_gateways_client(
    wire_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pins the OpenAI SDK hook the gateway's client overrides: a new SDK that stops
    # calling _process_response_data per event fails here instead of silently slowing.
    await llm._alitellm()
    counts = _count_parsing(monkeypatch)
    chunks = [chat_chunk(content=piece) for piece in ("Hel", "lo", " there")]
    chunks += [chat_chunk(finish_reason="stop"), chat_chunk(usage=(9, 3))]
    wire_tier.queue(WireReply([sse_body(chunks)]))

    events = await collect()

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there"
    assert Usage(9, 3) in events
    assert events[-1] == Finish("stop", "openai/wire-model")
    assert counts == {"read": 5, "sdk": 0}
    client = llm._sdk_client(llm._routes("standard", None, None)[0])
    assert llm._client_class is not None
    assert isinstance(client, llm._client_class)
    assert client is llm._sdk_client(llm._routes("standard", None, None)[0])


async def test_a_chunk_outside_the_schema_is_read_the_sdks_way(
    wire_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await llm._alitellm()
    counts = _count_parsing(monkeypatch)
    odd = chat_chunk(content="Hi")
    del odd["created"]  # some OpenAI-compatible servers leave fields out
    chunks = [odd, chat_chunk(finish_reason="stop"), chat_chunk(usage=(4, 1))]
    wire_tier.queue(WireReply([sse_body(chunks)]))

    events = await collect()

    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi"]
    assert events[-1] == Finish("stop", "openai/wire-model")
    assert counts == {"read": 3, "sdk": 1}


async def test_providers_outside_the_sdk_get_no_client() -> None:
    await llm._alitellm()
    wire = llm._Route("standard", "openai/m", "http://127.0.0.1:1/v1", "k", False)
    assert llm._sdk_client(wire) is not None
    route = llm._Route("standard", "anthropic/claude", "http://127.0.0.1:1/v1", "k", False)
    assert llm._sdk_client(route) is None
    default_endpoint = llm._Route("standard", "openai/gpt-4o-mini", None, "k", False)
    assert llm._sdk_client(default_endpoint) is None


def _count_wrapper_work(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count LiteLLM's per-chunk rebuild and its end-of-stream rebuild of the answer."""
    from litellm.litellm_core_utils import streaming_handler

    counts = {"chunk_creator": 0, "finalize": 0}
    wrapper = streaming_handler.CustomStreamWrapper
    chunk_creator, finalize = wrapper.chunk_creator, wrapper._finalize_completed_stream

    def counted_chunk_creator(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["chunk_creator"] += 1
        return chunk_creator(self, *args, **kwargs)

    async def counted_finalize(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["finalize"] += 1
        return await finalize(self, *args, **kwargs)

    monkeypatch.setattr(wrapper, "chunk_creator", counted_chunk_creator)
    monkeypatch.setattr(wrapper, "_finalize_completed_stream", counted_finalize)
    return counts


async def test_an_sdk_route_reads_the_sdks_chunks_without_litellms_stream_wrapper(
    wire_tier: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiteLLM's wrapper rebuilt every chunk and, at the end, the whole answer, priced and
    # logged it: most of the server's CPU per relayed token (bench/turn_overhead.py).
    await llm._alitellm()
    counts = _count_wrapper_work(monkeypatch)
    chunks = [chat_chunk(content=piece) for piece in ("Hel", "lo", " there")]
    chunks += [chat_chunk(finish_reason="stop"), chat_chunk(usage=(9, 3))]
    wire_tier.queue(WireReply([sse_body(chunks)]))

    events = await collect()

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there"
    assert events[-2:] == [Usage(9, 3), Finish("stop", "openai/wire-model")]
    assert counts == {"chunk_creator": 0, "finalize": 0}


async def test_a_provider_outside_the_sdk_still_streams_through_litellms_wrapper(
    llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await llm._alitellm()
    counts = _count_wrapper_work(monkeypatch)
    llm_script.reply(text=["Hel", "lo"], usage=(5, 2))

    events = await collect()

    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello"
    assert Usage(5, 2) in events
    assert counts["chunk_creator"] >= 2
    assert counts["finalize"] >= 1


def test_the_gateways_litellm_import_loads_the_tokenizer_the_first_call_would() -> None:
    # In a fresh process: this one's other tests may have loaded it already.
    script = (
        "import sys, django; django.setup()\n"
        "from openmates import llm\n"
        "llm._import_litellm()\n"
        "print('litellm.litellm_core_utils.default_encoding' in sys.modules)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "openmates.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
