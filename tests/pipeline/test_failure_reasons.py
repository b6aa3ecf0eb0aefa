"""A failed model call, from a scripted provider error to the ``error`` frame's ``reason``
and ``message`` and the AI call row (docs/protocol.md §8)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats.models import Message
from openmates import llm
from openmates.models import AICall
from pipeline.ids import new_id
from tests.chats.rest import signed_in_client

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
    assert (frames[-1]["status"], frames[-1]["reason"]) == ("failed", reason)
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


async def _answer_kept(user: Any, chat_id: str, message_id: str) -> tuple[str, Any]:
    """The answer's ``failure_reason`` on its row and in the REST message list."""

    def read() -> tuple[str, Any]:
        row = Message.objects.get(pk=message_id)
        listed = signed_in_client(user).get(f"/api/chats/{chat_id}/messages/?since=0").json()
        shown = next(m for m in listed["messages"] if m["message_id"] == message_id)
        return row.failure_reason, shown["failure_reason"]

    return await sync_to_async(read)()


async def test_a_failed_answer_keeps_its_reason_on_the_row_in_rest_and_in_the_snapshot(
    ws_client: Any, chat: Any, user: Any, llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(model="standard", error=599)
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Tell me")
    done = (await client.until("stream.done", wait_s=20))[-1]

    assert await _answer_kept(user, chat.pk, done["message_id"]) == (
        "provider_unreachable",
        "provider_unreachable",
    )
    # The sealed snapshot's stream.done (a later stream.resume) says why as well.
    await client.send(
        type="stream.resume", chat_id=chat.pk, task_id=done["task_id"], last_sequence=0
    )
    resumed = (await client.until("stream.done", wait_s=20))[-1]
    assert (resumed["status"], resumed["reason"]) == ("failed", "provider_unreachable")


async def test_a_done_answer_has_no_failure_reason(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Fine.", model="standard")
    llm_script.reply(text='{"follow_ups": [], "topic_changed": false, "summary": ""}', model="fast")
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Tell me")
    done = (await client.until("stream.done", wait_s=20))[-1]

    assert done["status"] == "done"
    assert "reason" not in done
    assert await _answer_kept(user, chat.pk, done["message_id"]) == ("", None)


def test_the_browser_keeps_every_reasons_english_text_as_the_server_words_it() -> None:
    # A reason read with a stored message (after a reload) is shown from this table.
    from pathlib import Path

    script = (Path(__file__).parents[2] / "static/js/app/reasons.js").read_text()
    table = script.split("export const ENGLISH = {", 1)[1].split("};", 1)[0]
    kept = dict(re.findall(r'^\s*(\w+): "(.*)",$', table, flags=re.MULTILINE))
    assert kept == llm.FAILURE_REASONS


def test_every_translation_in_the_browser_covers_every_reason() -> None:
    from pathlib import Path

    script = (Path(__file__).parents[2] / "static/js/app/reasons.js").read_text()
    tables = script.split("const TRANSLATIONS = {", 1)[1].split("\n};", 1)[0]
    languages = re.findall(r"^  (\w+): \{$", tables, flags=re.MULTILINE)
    blocks = re.split(r"^  \w+: \{$", tables, flags=re.MULTILINE)[1:]
    keys = {
        language: set(re.findall(r'^    (\w+): "[^"]+",$', block, flags=re.MULTILINE))
        for language, block in zip(languages, blocks, strict=True)
    }

    assert set(languages) >= {"de", "fr", "es", "it", "pt", "nl", "ja", "zh", "ru"}
    assert {language: sorted(k) for language, k in keys.items()} == {
        language: sorted(llm.FAILURE_REASONS) for language in languages
    }


def test_a_failed_tool_says_tool_failed_and_a_finished_one_no_reason() -> None:
    from pipeline import events as ev

    ids = {"chat_id": "c", "task_id": "t", "embed_id": "e", "tool": "web.search"}
    failed = ev.SkillStatus(status="error", error="HTTP 500", **ids).to_frame()
    finished = ev.SkillStatus(status="finished", preview="[]", **ids).to_frame()

    assert failed["reason"] == "tool_failed"
    assert "reason" not in finished


async def test_a_tool_that_fails_in_a_turn_says_tool_failed_and_its_embed_keeps_the_error(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    from chats.models import Embed

    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(
        tool_calls=[{"id": "call_1", "name": "calculator", "arguments": {"expression": "1 / 0"}}],
        model="standard",
    )
    llm_script.reply(text="Division by zero has no value.", model="standard")
    llm_script.reply(text='{"follow_ups": [], "topic_changed": false}', model="fast")
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="What is 1 / 0?"
    )

    frames = await client.until("postprocess.done", wait_s=20)
    frames = frames[: next(n for n, f in enumerate(frames) if f["type"] == "stream.done") + 1]

    statuses = [f for f in frames if f["type"] == "skill.status"]
    assert [(s["status"], s.get("reason")) for s in statuses] == [
        ("processing", None),
        ("error", "tool_failed"),
    ]
    assert statuses[1]["error"]
    # The answer goes on without the tool; the turn itself does not fail.
    assert (frames[-1]["status"], frames[-1].get("reason")) == ("done", None)
    embed = await sync_to_async(Embed.objects.get)(pk=statuses[1]["embed_id"])
    assert embed.status == "error"
