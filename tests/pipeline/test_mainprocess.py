"""Main processing's tool loop and model fallback (pipeline.mainprocess.respond) on the
real stack with a scripted model: at most five rounds of tool calls, at most five calls
of a round run (in parallel), only the turn's preselected tools run, and the next model
of the tier's list takes over only while no text was shown."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

from chats import services as chat_services
from chats.models import Embed
from openmates.db import db_call
from pipeline import events as ev
from pipeline.ids import new_id
from pipeline.mainprocess import MAX_PARALLEL, MAX_ROUNDS, MainContext, MainResult, respond
from pipeline.runtime import TurnControl
from skills.registry import ToolSpec, get_tool, register_tool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

TOOL = "tally_count"
FALLBACK_CHAIN = {"standard": [{"model": "scripted/primary"}, {"model": "scripted/backup"}]}
# Calls so far, running now, most at once; a call returns once "hold" calls run together
# (or after HOLD_S), so that calls started one after another are seen overlapping.
_running = {"now": 0, "most": 0, "calls": 0, "hold": 1}
_together = {"event": asyncio.Event()}
HOLD_S = 5.0


async def _tally(params: dict[str, Any], context: Any) -> dict[str, Any]:
    _running["calls"] += 1
    _running["now"] += 1
    _running["most"] = max(_running["most"], _running["now"])
    if _running["now"] >= _running["hold"]:
        _together["event"].set()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_together["event"].wait(), HOLD_S)
    finally:
        _running["now"] -= 1
    return {"success": True, "result": {"n": params["n"]}}


@pytest.fixture
def tally() -> ToolSpec:
    """A registered tool that counts its calls and how many run at once."""
    if get_tool(TOOL) is None:
        register_tool(
            name=TOOL,
            description="Count one number (test tool).",
            category="test",
            parameters={
                "type": "object",
                "properties": {"n": {"type": "integer", "description": "The number."}},
                "required": ["n"],
            },
            execute=_tally,
        )
    _running.update(now=0, most=0, calls=0, hold=1)
    _together["event"] = asyncio.Event()
    spec = get_tool(TOOL)
    assert spec is not None
    return spec


@pytest.fixture
async def ctx(chat: Any, user: Any, instance: Any, tally: ToolSpec) -> MainContext:
    """The main step's context for a turn of ``chat`` with only ``tally`` preselected."""
    reply_id = new_id()
    await db_call(chat_services.assistant_message_create, chat=chat, message_id=reply_id)
    return MainContext(
        chat=chat,
        instance=instance,
        user_id=user.pk,
        task_id=new_id(),
        assistant_message_id=reply_id,
        tier="standard",
        tools=(tally,),
        control=TurnControl(),
    )


async def _respond(ctx: MainContext) -> tuple[list[ev.ServerEvent], MainResult, list[Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Count for me."},
    ]
    result = MainResult()
    events = [event async for event in respond(ctx, messages, result)]
    return events, result, messages


def _calls(*numbers: int, name: str = TOOL) -> list[dict[str, Any]]:
    return [{"id": f"call_{n}", "name": name, "arguments": {"n": n}} for n in numbers]


def _tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


async def _embeds(chat: Any) -> list[str]:
    def tools() -> list[str]:
        return list(Embed.objects.filter(chat=chat).values_list("tool", flat=True))

    return await db_call(tools)


async def test_tools_are_offered_for_five_rounds_then_the_model_must_answer(
    ctx: MainContext, llm_script: Any
) -> None:
    for n in range(MAX_ROUNDS):
        llm_script.reply(tool_calls=_calls(n), model="standard")
    llm_script.reply(text="Counted to four.", model="standard")

    _, result, messages = await _respond(ctx)

    offered = ["tools" in request.params for request in llm_script.requests]
    assert offered == [True] * MAX_ROUNDS + [False]
    assert _running["calls"] == MAX_ROUNDS
    assert [m["tool_call_id"] for m in _tool_messages(messages)] == [
        f"call_{n}" for n in range(MAX_ROUNDS)
    ]
    assert (result.status, result.content) == ("done", "Counted to four.")
    assert len(result.embed_ids) == MAX_ROUNDS


async def test_tool_calls_in_the_round_offered_no_tools_do_not_run(
    ctx: MainContext, llm_script: Any
) -> None:
    for n in range(MAX_ROUNDS + 1):  # the last one ignores that no tool was offered
        llm_script.reply(tool_calls=_calls(n), model="standard")

    _, result, _ = await _respond(ctx)

    assert len(llm_script.requests) == MAX_ROUNDS + 1
    assert _running["calls"] == MAX_ROUNDS
    assert len(result.embed_ids) == MAX_ROUNDS


async def test_at_most_five_calls_of_a_round_run_at_once_and_the_rest_are_refused(
    ctx: MainContext, chat: Any, llm_script: Any
) -> None:
    _running["hold"] = MAX_PARALLEL
    llm_script.reply(tool_calls=_calls(*range(MAX_PARALLEL + 2)), model="standard")
    llm_script.reply(text="Five of seven.", model="standard")

    events, result, messages = await _respond(ctx)

    assert (_running["calls"], _running["most"]) == (MAX_PARALLEL, MAX_PARALLEL)
    processing = [e for e in events if isinstance(e, ev.SkillStatus) and e.status == "processing"]
    assert len(processing) == MAX_PARALLEL
    assert await _embeds(chat) == [TOOL] * MAX_PARALLEL
    sent = _tool_messages(messages)
    assert [m["tool_call_id"] for m in sent] == [f"call_{n}" for n in range(MAX_PARALLEL + 2)]
    for refused in sent[MAX_PARALLEL:]:
        assert "too many tool calls in one round" in refused["content"]
    for ran in sent[:MAX_PARALLEL]:
        assert '"success"' not in ran["content"]
        assert json.dumps({"n": int(ran["tool_call_id"][5:])}) in ran["content"]
    assert result.content == "Five of seven."


async def test_only_the_preselected_tools_run(ctx: MainContext, chat: Any, llm_script: Any) -> None:
    assert get_tool("calculator") is not None  # registered, just not chosen for this turn
    calls = [
        {"id": "call_calc", "name": "calculator", "arguments": {"expression": "6*7"}},
        {"id": "call_ghost", "name": "no_such_tool", "arguments": {}},
        *_calls(1),
    ]
    llm_script.reply(tool_calls=calls, model="standard")
    llm_script.reply(text="Only the tally.", model="standard")

    events, _, messages = await _respond(ctx)

    assert await _embeds(chat) == [TOOL]
    assert [e.tool for e in events if isinstance(e, ev.SkillStatus)] == [TOOL, TOOL]
    calc, ghost, ran = _tool_messages(messages)
    assert "tool calculator is not available" in calc["content"]
    assert "tool no_such_tool is not available" in ghost["content"]
    assert '{"n": 1}' in ran["content"]
    assert _running["calls"] == 1


async def test_the_next_model_takes_over_while_no_text_was_shown(
    ctx: MainContext, llm_script: Any, settings: Any
) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "standard": [{"model": "scripted/primary"}, {"model": "scripted/backup"}]
    }
    settings.LLM_RETRIES = 0
    llm_script.reply(model="primary", error=503)
    llm_script.reply(model="backup", text=["Fine", "."])

    events, result, _ = await _respond(ctx)

    assert [r.model for r in llm_script.requests] == ["primary", "backup"]
    assert events == [ev.ReplyDelta(text="Fine"), ev.ReplyDelta(text=".")]
    assert (result.status, result.content, result.model) == ("done", "Fine.", "scripted/backup")


async def test_after_text_was_shown_a_failure_interrupts_the_reply_without_fallback(
    ctx: MainContext, llm_script: Any, settings: Any
) -> None:
    settings.LLM_DEFAULT_TIERS = {
        "standard": [{"model": "scripted/primary"}, {"model": "scripted/backup"}]
    }
    settings.LLM_RETRIES = 0
    llm_script.reply(model="primary", text=["Hal", "f"], error=500, error_after=1)
    backup = llm_script.reply(model="backup", text="never shown")

    events, result, _ = await _respond(ctx)

    assert [r.model for r in llm_script.requests] == ["primary"]
    assert llm_script.replies == [backup]
    assert events[0] == ev.ReplyDelta(text="Hal")
    error = events[-1]
    assert isinstance(error, ev.Error)
    assert (error.code, error.message_id) == ("provider_error", ctx.assistant_message_id)
    assert (result.status, result.content) == ("interrupted", "Hal")
    llm_script.reset()


async def test_a_failure_of_every_model_before_any_text_fails_the_reply(
    ctx: MainContext, llm_script: Any, settings: Any
) -> None:
    settings.LLM_RETRIES = 0
    llm_script.reply(model="standard", error=503)

    events, result, _ = await _respond(ctx)

    assert [type(e) for e in events] == [ev.Error]
    assert (result.status, result.content, result.error) == ("failed", "", events[0])


async def test_a_cancelled_turn_stops_at_the_next_chunk(ctx: MainContext, llm_script: Any) -> None:
    llm_script.reply(text=["One", " two", " three"], model="standard")
    ctx.control.cancel.set()

    events, result, _ = await _respond(ctx)

    assert (events, result.status, result.content) == ([], "cancelled", "")
