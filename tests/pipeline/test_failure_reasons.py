"""A failed model call, from a scripted provider error to the ``error`` frame's ``reason``
and ``message`` and the AI call row (docs/protocol.md §8)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from openmates import llm
from openmates.models import AICall
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Chat", "icon": "chat", "category": "general", "tags": []}'

# (scripted reply of the standard tier, reason); 599 stands for a refused connection,
# 408 for LiteLLM's Timeout, 413 for its ContextWindowExceededError (tests/llm_fake.py).
CASES = [
    ({"error": 599}, "provider_unreachable"),
    ({"error": 503}, "provider_unreachable"),
    ({"error": 401}, "provider_auth"),
    ({"error": 429}, "provider_rate_limit"),
    ({"error": 413}, "context_too_long"),
    ({"error": 408}, "timeout"),
    ({"text": ""}, "empty_response"),
    ({"error": 400}, "provider_error"),
]


async def _failed_stream_row(chat_id: str) -> AICall:
    await llm.aflush_call_log()
    return await sync_to_async(
        lambda: AICall.objects.filter(chat_id=chat_id, kind="stream").latest("created_at")
    )()


@pytest.mark.parametrize(("reply", "reason"), CASES, ids=[case[1] + str(case[0]) for case in CASES])
async def test_a_provider_failure_reaches_the_frame_and_the_call_log_with_its_reason(
    ws_client: Any, chat: Any, user: Any, llm_script: Any, settings: Any, reply: Any, reason: str
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(model="standard", **reply)
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Tell me")

    frames = await client.until("stream.done", wait_s=20)

    error = next(f for f in frames if f["type"] == "error")
    assert (error["code"], error["reason"]) == ("provider_error", reason)
    assert error["message"] == llm.FAILURE_REASONS[reason]
    assert frames[-1]["status"] == "failed"
    row = await _failed_stream_row(chat.pk)
    assert (row.outcome, row.error_reason) == ("error", reason)
    assert row.error_message != ""


async def test_a_missing_provider_key_is_provider_not_configured(
    ws_client: Any, chat: Any, user: Any, llm_script: Any, settings: Any
) -> None:
    settings.LLM_DEFAULT_TIERS = {
        **settings.LLM_DEFAULT_TIERS,
        "standard": [{"model": "scripted/standard", "secret": "OPENMATES_TEST_UNSET_KEY"}],
    }
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Tell me")

    frames = await client.until("stream.done", wait_s=20)

    error = next(f for f in frames if f["type"] == "error")
    assert (error["code"], error["reason"]) == ("provider_error", "provider_not_configured")
    assert "administrator" in error["message"]


def test_a_failed_tool_says_tool_failed_and_a_finished_one_no_reason() -> None:
    from pipeline import events as ev

    ids = {"chat_id": "c", "task_id": "t", "embed_id": "e", "tool": "web.search"}
    failed = ev.SkillStatus(status="error", error="HTTP 500", **ids).to_frame()
    finished = ev.SkillStatus(status="finished", preview="[]", **ids).to_frame()

    assert failed["reason"] == "tool_failed"
    assert "reason" not in finished
