"""The gateway's tiers, retries, fallbacks, keys, call log, completions and embeddings."""

from __future__ import annotations

import math
import socket
import uuid
from decimal import Decimal
from typing import Any

import litellm
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from openmates import llm
from openmates.llm_stream import Finish, StreamError, TextDelta, ToolCall, Usage
from openmates.models import AICall
from tests.llm_fake import TierMapOnly, WireReply, chat_chunk, sse_body

USER = [{"role": "user", "content": "What is 2+2?"}]


async def collect(**kwargs: Any) -> list[Any]:
    kwargs.setdefault("tier", "standard")
    kwargs.setdefault("messages", USER)
    return [event async for event in llm.stream(**kwargs)]


def chain(settings: Any, *models: str, tier: str = "standard") -> None:
    settings.LLM_DEFAULT_TIERS = {tier: [{"model": m} for m in models]}


@pytest.fixture(autouse=True)
async def _close_sync_thread_connections() -> Any:
    # Async ORM calls run on asgiref's sync thread, whose connection Django's test
    # teardown never closes; left open, it blocks dropping the test database.
    yield
    await sync_to_async(connections.close_all)()


async def logged(chat_id: str) -> list[AICall]:
    assert await llm.aflush_call_log()
    return [row async for row in AICall.objects.filter(chat_id=chat_id).order_by("id")]


# --- fallback and retries ---


async def test_fallback_before_visible_output_uses_the_next_entry(
    llm_script: Any, settings: Any
) -> None:
    chain(settings, "scripted/primary", "scripted/backup")
    settings.LLM_RETRIES = 1
    llm_script.reply(model="primary", error=503)
    llm_script.reply(model="primary", error=500)
    llm_script.reply(model="backup", text=["Four", "."], usage=(9, 2))

    events = await collect()

    assert events == [
        TextDelta("Four"),
        TextDelta("."),
        Usage(9, 2),
        Finish("stop", "scripted/backup"),
    ]
    assert [r.model for r in llm_script.requests] == ["primary", "primary", "backup"]


async def test_no_fallback_after_visible_text(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/primary", "scripted/backup")
    settings.LLM_RETRIES = 2
    llm_script.reply(model="primary", text=["Fo", "ur"], error=500, error_after=1)
    backup = llm_script.reply(model="backup", text="never used")

    events = await collect()

    assert events == [
        TextDelta("Fo"),
        StreamError("provider_unavailable", "The model provider is unavailable.", True),
    ]
    assert [r.model for r in llm_script.requests] == ["primary"]
    assert llm_script.replies == [backup]
    llm_script.reset()


async def test_rate_limit_is_retried_on_the_same_model(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/only")
    settings.LLM_RETRIES = 2
    llm_script.reply(error=429)
    llm_script.reply(text="4")

    events = await collect()

    assert events == [TextDelta("4"), Usage(12, 7), Finish("stop", "scripted/only")]
    assert [r.model for r in llm_script.requests] == ["only", "only"]


async def test_tool_not_in_request_error_is_retried(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/only")
    settings.LLM_RETRIES = 1
    llm_script.reply(
        error=400,
        error_message="tool call validation failed: attempted to call tool 'x' "
        "which was not in request.tools",
    )
    llm_script.reply(text="ok")

    assert await collect() == [TextDelta("ok"), Usage(12, 7), Finish("stop", "scripted/only")]
    assert len(llm_script.requests) == 2


async def test_refused_key_moves_to_the_next_entry_without_retrying(
    llm_script: Any, settings: Any
) -> None:
    chain(settings, "scripted/primary", "scripted/backup")
    settings.LLM_RETRIES = 3
    llm_script.reply(model="primary", error=401)
    llm_script.reply(model="backup", text="ok")

    events = await collect()

    assert events[-1] == Finish("stop", "scripted/backup")
    assert [r.model for r in llm_script.requests] == ["primary", "backup"]


async def test_every_entry_failing_ends_with_the_last_error(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/primary", "scripted/backup")
    settings.LLM_RETRIES = 0
    llm_script.reply(model="primary", error=500)
    llm_script.reply(model="backup", error=429)

    events = await collect()

    assert events == [
        StreamError("rate_limited", "The model provider is rate-limiting requests.", True)
    ]


async def test_a_slow_chunk_times_out(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/slow")
    settings.LLM_RETRIES = 0
    llm_script.reply(text=["a", "b"], delay_s=0.5)

    events = await collect(timeout_s=0.05)

    assert events == [StreamError("timeout", "The model did not answer in time.", False)]


async def test_unknown_tier_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tier 'huge'"):
        await collect(tier="huge")


# --- keys ---


async def test_missing_secret_is_a_configuration_error_naming_it(settings: Any) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "scripted/keyed", "secret": "OPENMATES_TEST_MISSING_KEY"}]
    }

    with pytest.raises(llm.LLMConfigurationError, match="OPENMATES_TEST_MISSING_KEY") as info:
        await llm.complete(tier="fast", messages=USER)

    assert info.value.missing_secrets == ("OPENMATES_TEST_MISSING_KEY",)


async def test_key_is_passed_explicitly_to_the_provider(
    llm_script: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENMATES_TEST_PROVIDER_KEY", "sk-test-4711")
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "scripted/keyed", "secret": "OPENMATES_TEST_PROVIDER_KEY"}]
    }
    llm_script.reply(text="hello")

    result = await llm.complete(tier="fast", messages=USER)

    assert result.text == "hello"
    assert llm_script.requests[0].api_key == "sk-test-4711"


async def test_entry_without_secret_never_uses_an_ambient_key(
    llm_script: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    chain(settings, "scripted/plain")
    llm_script.reply(text="hi")

    await llm.complete(tier="standard", messages=USER)

    assert llm_script.requests[0].api_key == "no-key"


@pytest.mark.django_db(transaction=True)
async def test_instance_secret_supplies_the_key_and_its_absence_is_named(
    llm_script: Any, owner: Any
) -> None:
    from instances.services import ainstance_tier_secrets_get, instance_create, instance_secret_set

    instance = await sync_to_async(instance_create)(
        slug=f"gw{uuid.uuid4().hex[:8]}",
        name="Gateway",
        owner=owner,
        tier_map={"heavy": [{"model": "scripted/heavy", "secret": "SCRIPTED_KEY"}]},
    )

    with pytest.raises(llm.LLMConfigurationError, match="SCRIPTED_KEY"):
        await llm.complete(
            tier="heavy",
            messages=USER,
            instance=instance,
            secrets=await ainstance_tier_secrets_get(instance=instance),
        )

    await sync_to_async(instance_secret_set)(
        instance=instance, name="SCRIPTED_KEY", value="sk-instance-1"
    )
    llm_script.reply(model="heavy", text="done")
    result = await llm.complete(
        tier="heavy",
        messages=USER,
        instance=instance,
        secrets=await ainstance_tier_secrets_get(instance=instance),
    )

    assert result.text == "done"
    assert llm_script.requests[-1].api_key == "sk-instance-1"


async def test_an_instance_entry_never_takes_its_key_from_the_environment(
    llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRIPTED_KEY", "sk-operator-env")
    instance = TierMapOnly({"fast": [{"model": "scripted/own", "secret": "SCRIPTED_KEY"}]})

    with pytest.raises(llm.LLMConfigurationError, match="SCRIPTED_KEY") as missing:
        await llm.complete(tier="fast", messages=USER, instance=instance)
    llm_script.reply(model="own", text="ok")
    await llm.complete(
        tier="fast", messages=USER, instance=instance, secrets={"SCRIPTED_KEY": "sk-passed-in"}
    )

    assert missing.value.missing_secrets == ("SCRIPTED_KEY",)
    assert [r.api_key for r in llm_script.requests] == ["sk-passed-in"]


async def test_a_streamed_call_and_an_embedding_take_the_passed_secrets(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_EMBEDDING_DIMENSIONS = 3
    instance = TierMapOnly({"standard": [{"model": "scripted/streamer", "secret": "KEY_S"}]})
    instance.embedding_model = "scripted/streamer"  # type: ignore[assignment]
    llm_script.reply(model="streamer", text=["hi"])
    llm_script.reply(model="streamer", embedding=[[1.0, 0.0, 0.0]])

    events = await collect(instance=instance, secrets={"KEY_S": "sk-stream"})
    vectors = await llm.embed(["a"], instance=instance, secrets={"KEY_S": "sk-stream"})

    assert TextDelta("hi") in events
    assert vectors == [[1.0, 0.0, 0.0]]
    assert [r.api_key for r in llm_script.requests] == ["sk-stream", "sk-stream"]


# --- complete() ---


async def test_complete_returns_text_tool_calls_and_usage(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/c")
    llm_script.reply(
        text="Calling <tool_call>{}</tool_call>",
        tool_calls=[{"id": "k1", "name": "calc", "arguments": {"expr": "2+2"}}],
        usage=(40, 11),
    )

    result = await llm.complete(tier="standard", messages=USER, tools=[{"type": "function"}])

    assert result == llm.Completion(
        text="Calling ",
        tool_calls=[ToolCall("k1", "calc", {"expr": "2+2"})],
        usage=Usage(40, 11),
        finish_reason="tool_calls",
        model="scripted/c",
    )
    assert llm_script.requests[0].params["tools"] == [{"type": "function"}]


async def test_complete_with_a_schema_parses_the_json_answer(
    llm_script: Any, settings: Any
) -> None:
    chain(settings, "scripted/json", tier="fast")
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    llm_script.reply(text='{"title": "Sums"}')

    result = await llm.complete(tier="fast", messages=USER, response_schema=schema, stage="title")

    assert result.data == {"title": "Sums"}
    assert llm_script.requests[0].params["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }


async def test_invalid_json_answer_falls_back_then_raises(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/a", "scripted/b", tier="fast")
    llm_script.reply(model="a", text="Sure! Here is the title: Sums")
    llm_script.reply(model="b", text='["not", "an", "object"]')

    with pytest.raises(llm.LLMError) as info:
        await llm.complete(tier="fast", messages=USER, response_schema={"type": "object"})

    assert info.value.code == "invalid_json"
    assert [r.model for r in llm_script.requests] == ["a", "b"]


async def test_complete_retries_a_server_error(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/c")
    settings.LLM_RETRIES = 1
    llm_script.reply(error=502)
    llm_script.reply(text="fine")

    assert (await llm.complete(tier="standard", messages=USER)).text == "fine"


# --- the local (base model) route ---


def _base_model_fast_tier(settings: Any, llm_wire: Any, pieces: list[str]) -> None:
    """The fast tier on the bundled model's route at the loopback server, which answers
    once with ``pieces`` as text-completion chunks (the last one ends the answer)."""
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "text-completion-openai/gemma-3-270m", "api_base": llm_wire.api_base}]
    }
    chunks = [
        {
            "id": "c",
            "object": "text_completion",
            "created": 1,
            "model": "g",
            "choices": [{"index": 0, "text": text, "finish_reason": "stop" if last else None}],
        }
        for last, text in ((n == len(pieces) - 1, t) for n, t in enumerate(pieces))
    ]
    llm_wire.queue(WireReply([sse_body(chunks)]))


async def test_base_model_route_sends_a_transcript_to_the_completions_endpoint(
    settings: Any, llm_wire: Any
) -> None:
    _base_model_fast_tier(settings, llm_wire, [" Paris", "."])
    settings.LLM_LOCAL_MAX_TOKENS = 64
    messages = [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": "Capital of France?"},
    ]

    events = await collect(tier="fast", messages=messages, tools=[{"type": "function"}])

    # The space the "A:" prompt makes the model start with is no part of the answer.
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("Paris"), TextDelta(".")]
    assert events[-1] == Finish("stop", "text-completion-openai/gemma-3-270m")
    sent = llm_wire.requests[0]
    assert sent["path"] == "/v1/completions"
    assert sent["body"]["prompt"] == "You are brief.\n\nQ: Capital of France?\nA:"
    assert sent["body"]["stop"] == ["\nQ:", "\nA:"]
    assert sent["body"]["max_tokens"] == 64
    assert sent["body"]["temperature"] == 0
    assert "tools" not in sent["body"]


async def test_a_base_model_answer_of_only_spaces_is_an_empty_response(
    settings: Any, llm_wire: Any
) -> None:
    _base_model_fast_tier(settings, llm_wire, [" ", "\n"])

    events = await collect(tier="fast", messages=USER)

    assert not [e for e in events if isinstance(e, TextDelta)]
    assert events[-1] == StreamError("empty_response", "The model returned an empty answer.", False)


def test_base_model_prompt_drops_the_oldest_turns_to_fit() -> None:
    from openmates.llm_stream import base_model_prompt

    messages = [{"role": "system", "content": "S"}] + [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n}"} for n in range(9)
    ]

    prompt = base_model_prompt(messages, max_chars=36)

    assert prompt == "S\n\nQ: turn 6\nA: turn 7\nQ: turn 8\nA:"


# --- the AI call log ---


@pytest.mark.django_db(transaction=True)
async def test_each_attempt_is_logged_with_tokens_cost_and_outcome(
    settings: Any, llm_wire: Any, llm_script: Any
) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "standard": [
            {"model": "scripted/flaky"},
            {"model": "openai/gpt-4o-mini", "api_base": llm_wire.api_base},
        ]
    }
    settings.LLM_RETRIES = 0
    llm_script.reply(model="flaky", error=429)
    body = sse_body(
        [chat_chunk(content="4"), chat_chunk(finish_reason="stop"), chat_chunk(usage=(1000, 200))]
    )
    llm_wire.queue(WireReply([body]))
    chat_id = str(uuid.uuid4())

    events = await collect(chat_id=chat_id, stage="main")

    assert events[-1] == Finish("stop", "openai/gpt-4o-mini")
    failed, answered = await logged(chat_id)
    prices = litellm.model_cost["gpt-4o-mini"]
    expected = Decimal(
        str(round(1000 * prices["input_cost_per_token"] + 200 * prices["output_cost_per_token"], 8))
    )
    assert expected > 0
    assert (failed.provider, failed.model, failed.outcome, failed.error_class) == (
        "scripted",
        "scripted/flaky",
        "error",
        "RateLimitError",
    )
    assert (failed.prompt_tokens, failed.completion_tokens, failed.cost_usd) == (0, 0, 0)
    assert (answered.kind, answered.stage, answered.tier, answered.provider) == (
        "stream",
        "main",
        "standard",
        "openai",
    )
    assert (answered.prompt_tokens, answered.completion_tokens) == (1000, 200)
    assert answered.cost_usd == expected
    assert answered.outcome == "ok"
    assert answered.error_class == ""
    assert answered.latency_ms > 0


@pytest.mark.django_db(transaction=True)
async def test_completion_log_row_has_no_cost_for_unknown_models(
    llm_script: Any, settings: Any
) -> None:
    chain(settings, "scripted/unknown", tier="fast")
    llm_script.reply(text="Title", usage=(30, 3))
    chat_id = str(uuid.uuid4())

    await llm.complete(tier="fast", messages=USER, stage="title", chat_id=chat_id)

    (row,) = await logged(chat_id)
    assert (row.kind, row.stage, row.tier, row.model) == (
        "completion",
        "title",
        "fast",
        "scripted/unknown",
    )
    assert (row.prompt_tokens, row.completion_tokens, row.cost_usd) == (30, 3, Decimal(0))


@pytest.mark.django_db(transaction=True)
async def test_a_stream_the_caller_abandons_is_logged_as_cancelled(
    llm_script: Any, settings: Any
) -> None:
    chain(settings, "scripted/long")
    llm_script.reply(text=["a", "b", "c", "d"])
    chat_id = str(uuid.uuid4())

    events = llm.stream(tier="standard", messages=USER, chat_id=chat_id)
    first = await anext(events)
    await events.aclose()  # type: ignore[attr-defined]

    assert first == TextDelta("a")
    (row,) = await logged(chat_id)
    assert row.outcome == "cancelled"


@pytest.mark.django_db(transaction=True)
async def test_log_rows_never_hold_message_text(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/c")
    secret_text = "my-very-private-sentence"
    llm_script.reply(text=f"echo {secret_text}")
    chat_id = str(uuid.uuid4())

    await llm.complete(
        tier="standard", messages=[{"role": "user", "content": secret_text}], chat_id=chat_id
    )

    (row,) = await logged(chat_id)
    values = await AICall.objects.filter(pk=row.pk).values().aget()
    assert not any(secret_text in str(v) for v in values.values())


# --- embeddings ---


async def test_local_embeddings_are_normalised_and_semantic() -> None:
    vectors = await llm.embed(["I like cats", "I love kittens", "Quarterly tax filing rules"])

    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    cats = sum(a * b for a, b in zip(vectors[0], vectors[1], strict=True))
    taxes = sum(a * b for a, b in zip(vectors[0], vectors[2], strict=True))
    assert cats > 0.6 > taxes


def test_the_multilingual_embedder_places_a_request_near_its_translation() -> None:
    from openmates.embeddings import local_embed

    vectors = local_embed(
        "local/use-multilingual-v3",
        ["What time is it in Tokyo?", "東京は今何時ですか", "Wie spät ist es in Tokio?",
         "Write a poem about the sea"],
    )  # fmt: skip

    assert [len(v) for v in vectors] == [512] * 4
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)

    def cosine(a: int, b: int) -> float:
        return sum(x * y for x, y in zip(vectors[a], vectors[b], strict=True))

    assert min(cosine(0, 1), cosine(0, 2)) > 0.6 > 0.3 > cosine(0, 3)


async def test_embedding_through_a_provider_uses_the_tier_entry_key(
    llm_script: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.LLM_EMBEDDING_MODEL = "scripted/embedder"
    settings.LLM_EMBEDDING_DIMENSIONS = 3
    llm_script.reply(model="embedder", embedding=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

    vectors = await llm.embed(["a", "b"])

    assert vectors == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert llm_script.requests[0].input == ["a", "b"]


async def test_embedding_of_the_wrong_dimension_is_refused(llm_script: Any, settings: Any) -> None:
    settings.LLM_EMBEDDING_MODEL = "scripted/embedder"
    settings.LLM_EMBEDDING_DIMENSIONS = 4
    llm_script.reply(model="embedder", embedding=[[1.0, 0.0, 0.0]])

    with pytest.raises(llm.LLMError, match="not 4-dimensional"):
        await llm.embed(["a"])


async def test_unknown_local_embedding_model_is_a_configuration_error(settings: Any) -> None:
    settings.LLM_EMBEDDING_MODEL = "local/no-such-model"

    with pytest.raises(llm.LLMConfigurationError, match="no-such-model"):
        await llm.embed(["a"])


# --- health and the guard ---


def test_health_is_up_once_litellm_is_loaded_and_no_local_server_is_configured() -> None:
    llm._import_litellm()

    assert {k: v for k, v in llm.health().items() if k != "endpoint"} == {
        "status": "up",
        "reason": None,
    }


def test_health_waits_for_the_local_model_server(settings: Any, llm_wire: Any) -> None:
    llm._import_litellm()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    settings.LLM_LOCAL_API_BASE = closed
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "text-completion-openai/g", "api_base": closed}]
    }

    assert llm.health()["status"] == "starting"

    settings.LLM_LOCAL_API_BASE = llm_wire.api_base
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "text-completion-openai/g", "api_base": llm_wire.api_base}]
    }
    assert {k: v for k, v in llm.health().items() if k != "endpoint"} == {
        "status": "up",
        "reason": None,
    }


def test_network_guard_refuses_connections_outside_loopback() -> None:
    with (
        socket.socket() as sock,
        pytest.raises(ConnectionRefusedError, match="test network guard"),
    ):
        sock.connect(("192.0.2.1", 443))


@pytest.mark.parametrize(
    ("argv", "serving"),
    [
        (["/usr/bin/daphne", "openmates.asgi:application"], True),
        (["/venv/lib/python3.11/site-packages/daphne/__main__.py", "-p", "8000"], True),
        (["manage.py", "runserver"], True),
        (["manage.py", "migrate"], False),
        (["manage.py", "runlocal"], False),  # runlocal's Daphne child warms its own
        (["/venv/bin/pytest"], False),
    ],
)
def test_only_server_processes_warm_litellm_at_start(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], serving: bool
) -> None:
    from openmates import apps

    monkeypatch.setattr("sys.argv", argv)

    assert apps.serving() is serving


def test_base_model_tiers_are_recognised(settings: Any) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "text-completion-openai/gemma-3-270m", "api_base": "http://x/v1"}],
        "standard": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_KEY"}],
    }

    assert llm.is_base_model(tier="fast") is True
    assert llm.is_base_model(tier="standard") is False
    assert llm.is_base_model(tier="heavy") is False


async def test_context_tokens_come_from_settings_or_the_price_map(settings: Any) -> None:
    settings.LLM_LOCAL_CONTEXT_TOKENS = 8192
    settings.LLM_FALLBACK_CONTEXT_TOKENS = 4096
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "text-completion-openai/gemma-3-270m"}],
        "standard": [{"model": "openai/gpt-4o-mini"}],
        "heavy": [{"model": "scripted/unknown"}],
    }

    assert await llm.context_tokens(tier="fast") == 8192
    assert (
        await llm.context_tokens(tier="standard")
        == litellm.model_cost["gpt-4o-mini"]["max_input_tokens"]
    )
    assert await llm.context_tokens(tier="heavy") == 4096


def test_litellm_debug_output_is_off() -> None:
    import logging

    lib = llm._import_litellm()

    assert lib.suppress_debug_info is True
    assert lib.turn_off_message_logging is True
    assert logging.getLogger("LiteLLM").getEffectiveLevel() >= logging.WARNING


async def test_embedding_provider_error_is_an_llm_error(llm_script: Any, settings: Any) -> None:
    settings.LLM_EMBEDDING_MODEL = "scripted/embedder"
    llm_script.reply(model="embedder", error=429)

    with pytest.raises(llm.LLMError) as info:
        await llm.embed(["a"])

    assert (info.value.code, info.value.retryable) == ("rate_limited", True)


async def test_provider_errors_echoing_the_prompt_are_not_logged(
    llm_script: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    chain(settings, "scripted/strict", tier="fast")
    settings.LLM_RETRIES = 0
    private = "private-words-of-the-user"
    llm_script.reply(error=400, error_message=f"Invalid request: messages[0]={private}")

    with pytest.raises(llm.LLMError) as info:
        await llm.complete(tier="fast", messages=[{"role": "user", "content": private}])

    assert info.value.code == "bad_request"
    assert private not in str(info.value)
    assert private not in caplog.text


@pytest.mark.django_db
def test_ai_calls_are_read_only_in_the_admin(admin_client: Any) -> None:
    AICall.objects.create(
        kind="completion",
        stage="title",
        tier="fast",
        provider="openai",
        model="openai/gpt-4o-mini",
        prompt_tokens=10,
        completion_tokens=2,
        latency_ms=12.5,
        outcome="ok",
    )

    listing = admin_client.get("/admin/openmates/aicall/")
    adding = admin_client.get("/admin/openmates/aicall/add/")

    assert listing.status_code == 200
    assert b"openai/gpt-4o-mini" in listing.content
    assert adding.status_code == 403


async def test_a_slow_completion_times_out(llm_script: Any, settings: Any) -> None:
    chain(settings, "scripted/slow", tier="fast")
    settings.LLM_RETRIES = 0
    llm_script.reply(text="late", delay_s=0.5)

    with pytest.raises(llm.LLMError) as info:
        await llm.complete(tier="fast", messages=USER, timeout_s=0.05)

    assert (info.value.code, info.value.retryable) == ("timeout", False)


@pytest.mark.django_db(transaction=True)
async def test_default_tiers_take_their_key_from_the_environment_even_for_an_instance(
    llm_script: Any, settings: Any, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from instances.services import instance_create

    monkeypatch.setenv("OPENMATES_TEST_DEFAULT_KEY", "sk-operator")
    settings.LLM_DEFAULT_TIERS = {
        "fast": [{"model": "scripted/default", "secret": "OPENMATES_TEST_DEFAULT_KEY"}]
    }
    instance = await sync_to_async(instance_create)(
        slug=f"gd{uuid.uuid4().hex[:8]}", name="Defaults", owner=owner
    )
    llm_script.reply(text="ok")

    await llm.complete(tier="fast", messages=USER, instance=instance)

    assert llm_script.requests[0].api_key == "sk-operator"
