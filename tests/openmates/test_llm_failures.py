"""Failure reasons of the gateway (docs/protocol.md §8): classification, the sanitised
message on the AI call row, readiness naming its endpoint, the admin's display."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from openmates import llm
from openmates.admin import latency_text
from openmates.llm_calllog import sanitised_error_message
from openmates.llm_stream import StreamError
from openmates.models import AICall

USER = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(autouse=True)
async def _close_sync_thread_connections() -> Any:
    # Async ORM calls run on asgiref's sync thread, whose connection Django's test
    # teardown never closes; left open, it blocks dropping the test database.
    yield
    await sync_to_async(connections.close_all)()


async def _last_row(chat_id: str) -> AICall:
    await llm.aflush_call_log()
    return await sync_to_async(lambda: AICall.objects.filter(chat_id=chat_id).latest("id"))()


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        (599, "connection_error", "provider_unreachable"),
        (503, "provider_unavailable", "provider_unreachable"),
        (401, "auth_failed", "provider_auth"),
        (429, "rate_limited", "provider_rate_limit"),
        (413, "context_too_long", "context_too_long"),
        (408, "timeout", "timeout"),
        (400, "bad_request", "provider_error"),
    ],
)
@pytest.mark.django_db(transaction=True)
async def test_each_provider_error_is_logged_with_its_reason(
    llm_script: Any, settings: Any, status: int, code: str, reason: str
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(error=status, error_message="the provider says no")
    chat_id = f"reason-{status}"

    events = [e async for e in llm.stream(tier="standard", messages=USER, chat_id=chat_id)]

    assert isinstance(events[-1], StreamError)
    assert events[-1].code == code
    assert llm.failure_reason(code) == reason
    row = await _last_row(chat_id)
    assert (row.outcome, row.error_reason) == ("error", reason)
    assert "the provider says no" in row.error_message


@pytest.mark.django_db(transaction=True)
async def test_a_stream_with_no_text_and_no_tool_call_is_an_empty_response(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(text="")

    events = [e async for e in llm.stream(tier="standard", messages=USER, chat_id="empty")]

    assert events == [StreamError("empty_response", "The model returned an empty answer.", False)]
    row = await _last_row("empty")
    assert (row.outcome, row.error_reason) == ("error", "empty_response")


@pytest.mark.django_db(transaction=True)
async def test_an_empty_answer_falls_back_to_the_next_entry(llm_script: Any, settings: Any) -> None:
    settings.LLM_DEFAULT_TIERS = {"standard": [{"model": "scripted/a"}, {"model": "scripted/b"}]}
    llm_script.reply(text="", model="a")
    llm_script.reply(text="four", model="b")

    events = [e async for e in llm.stream(tier="standard", messages=USER)]

    assert [e.text for e in events if isinstance(e, llm.TextDelta)] == ["four"]


@pytest.mark.django_db(transaction=True)
async def test_the_key_in_a_provider_message_is_redacted_on_the_row(
    llm_script: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENMATES_TEST_KEY", "k3y-Value-of-the-operator")
    settings.LLM_RETRIES = 0
    settings.LLM_DEFAULT_TIERS = {
        "standard": [{"model": "scripted/keyed", "secret": "OPENMATES_TEST_KEY"}]
    }
    llm_script.reply(
        error=401, error_message="Incorrect API key provided: k3y-Value-of-the-operator."
    )

    [e async for e in llm.stream(tier="standard", messages=USER, chat_id="keyed")]

    row = await _last_row("keyed")
    assert row.error_reason == "provider_auth"
    assert "k3y-Value-of-the-operator" not in row.error_message
    assert "Incorrect API key provided: [redacted]" in row.error_message


@pytest.mark.django_db(transaction=True)
async def test_prompt_text_quoted_by_the_provider_is_not_on_the_row(
    llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    private = "private words of the user, quoted back"
    llm_script.reply(error=400, error_message=f"Invalid request: messages[0]={private} (bad)")

    messages = [{"role": "user", "content": f"Hello. {private}. Bye."}]
    [e async for e in llm.stream(tier="standard", messages=messages, chat_id="quoted")]

    row = await _last_row("quoted")
    assert "private" not in row.error_message
    assert "quoted back" not in row.error_message
    assert row.error_message.startswith("litellm.BadRequestError")
    assert "[text removed]" in row.error_message


def test_the_sanitiser_removes_credentials_quotes_and_bodies() -> None:
    text = (
        'Bearer abc.def-123 failed; api_key="sk-proj-ABCDEFGH12345678" for '
        "'a quoted prompt here' body {\"messages\": [1]} " + "word " * 80
    )

    clean = sanitised_error_message(text, secrets=("nothing-like-it",))

    assert "abc.def-123" not in clean
    assert "sk-proj" not in clean
    assert "a quoted prompt" not in clean
    assert '"messages"' not in clean
    assert clean.startswith(
        'Bearer [redacted] failed; api_key="[redacted]" for [text removed] body [text removed] word'
    )
    assert len(clean) == 300
    assert clean.endswith("…")


def test_readiness_names_the_default_endpoint_and_a_recent_outage(settings: Any) -> None:
    settings.LLM_DEFAULT_TIERS = {"standard": [{"model": "scripted/standard"}]}
    route = llm._Route("standard", "scripted/standard", None, "no-key", base_model=False)

    up = llm.health()
    llm._endpoint_outcome(route, "provider_unreachable")
    down = llm.health()
    llm._endpoint_outcome(route, "")
    again = llm.health()

    assert (up["status"], up["endpoint"]) == ("up", "scripted/standard")
    assert down == {
        "status": "down",
        "reason": "the last call to scripted/standard failed: provider_unreachable",
        "endpoint": "scripted/standard",
    }
    assert again["status"] == "up"


def test_readiness_is_down_when_the_endpoint_does_not_answer(settings: Any) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    api_base = f"http://127.0.0.1:{closed_port}/v1"
    settings.LLM_DEFAULT_TIERS = {"standard": [{"model": "openai/m", "api_base": api_base}]}

    state = llm.health()

    assert state == {
        "status": "down",
        "reason": f"model endpoint {api_base} not answering",
        "endpoint": f"openai/m at {api_base}",
    }


def test_latency_is_whole_milliseconds_with_the_unit() -> None:
    assert [latency_text(1106.079038000189), latency_text(0.4), latency_text(None)] == [
        "1106 ms",
        "0 ms",
        "-",
    ]


@pytest.mark.django_db
def test_the_admin_lists_calls_by_instance_name_with_reason_and_latency(
    admin_client: Any, admin_user: Any
) -> None:
    from instances.services import instance_create

    instance = instance_create(slug="adm-calls", name="Research Team", owner=admin_user)
    AICall.objects.create(
        instance_id=instance.pk,
        kind="stream",
        stage="main",
        tier="standard",
        provider="openai",
        model="openai/gpt-4o-mini",
        latency_ms=1106.079038000189,
        outcome="error",
        error_class="APIConnectionError",
        error_reason="provider_unreachable",
        error_message="litellm.APIConnectionError: Connection refused",
    )

    listing = admin_client.get("/admin/openmates/aicall/").content.decode()
    detail_url = f"/admin/openmates/aicall/{AICall.objects.get().pk}/change/"
    detail = admin_client.get(detail_url).content.decode()
    instance_page = admin_client.get(f"/admin/instances/instance/{instance.pk}/change/")

    assert "Research Team" in listing
    assert "1106 ms" in listing
    assert "1106.079" not in listing
    assert "provider_unreachable" in detail
    assert "Connection refused" in detail
    assert "provider_unreachable (litellm.APIConnectionError: Connection refused)" in (
        instance_page.content.decode()
    )
