"""Main processing (docs/architecture.md §6): the streamed answer and the tool loop.

``respond(...)`` is an async generator of events (``ReplyDelta``, ``SkillStatus``,
``EmbedUpdate``, ``Error``) that fills a :class:`MainResult` as it goes. Tool loop: at
most ``MAX_ROUNDS`` rounds of tool calls; per call a 20 s timeout and one retry (in
``skills.executor``), up to ``MAX_PARALLEL`` in parallel; only preselected tools run;
every result is paired with its call in the history sent back to the model. Tool output
is untrusted: screened once as each call finishes (``pipeline.tool_output``: invisible
Unicode stripped, scored for prompt injection — withheld at ≥ 7, redacted at 5-6.9), and
that screened form is what the embed cache keeps, ``embed.update`` carries and the model
sees, fenced. After each round the turn's tool results are cut to what the tier's context
leaves for the next call (``prompts.tool_results_fit``). A tool cancelled through
``skill.cancel`` marks its embed ``cancelled`` and the model continues with that result.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chats import cache as chat_cache
from chats import services as chat_services
from instances.services import ainstance_tier_secrets_get
from openmates import llm
from pipeline import events as ev
from pipeline import prompts
from pipeline.db import db_call
from pipeline.ids import new_id
from pipeline.protocol import ErrorCode, max_reply_bytes
from pipeline.runtime import TurnControl
from pipeline.tool_output import fence_tool_output, screen_tool_output, tool_output_text
from skills.executor import execute_tool
from skills.registry import ToolContext, ToolSpec
from skills.services import atool_context_build

MAX_ROUNDS = 5
MAX_PARALLEL = 5
PREVIEW_CHARS = 200


@dataclass
class MainResult:
    """What the main step produced (filled while ``respond`` runs)."""

    parts: list[str] = field(default_factory=list)
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: str = "done"  # done | interrupted | failed | cancelled
    error: ev.Error | None = None
    embed_ids: list[str] = field(default_factory=list)
    # "length" once the reply reached protocol.max_reply_bytes() and was cut there, or
    # the provider said it stopped at its token limit.
    finish_reason: str | None = None
    reply_bytes: int = 0

    @property
    def content(self) -> str:
        return "".join(self.parts)

    def take_text(self, text: str) -> str:
        """The part of ``text`` that keeps the reply within ``max_reply_bytes()`` (UTF-8),
        cut at a character boundary; past the cap ``finish_reason`` becomes ``"length"``."""
        size = len(text.encode("utf-8"))
        room = max_reply_bytes() - self.reply_bytes
        if size > room:
            text = text.encode("utf-8")[: max(room, 0)].decode("utf-8", "ignore")
            size = len(text.encode("utf-8"))
            self.finish_reason = "length"
        self.reply_bytes += size
        return text

    @property
    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}


@dataclass(frozen=True)
class MainContext:
    """The turn's identity and what the tool loop needs."""

    chat: Any
    instance: Any
    user_id: int
    task_id: str
    assistant_message_id: str
    tier: str
    tools: Sequence[ToolSpec]
    control: TurnControl
    # The messages for a tier entry whose model does not see images, when the question
    # has image parts (``pipeline.files.blind_messages``).
    without_vision: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None


async def respond(
    ctx: MainContext, messages: list[dict[str, Any]], result: MainResult
) -> AsyncIterator[ev.ServerEvent]:
    """Stream the answer to ``messages`` (system prompt and history included)."""
    schemas = [spec.llm_schema() for spec in ctx.tools] or None
    tool_context: ToolContext | None = None
    tool_texts: dict[str, tuple[str, str]] = {}  # tool_call_id → (tool, screened text)
    for round_number in range(MAX_ROUNDS + 1):
        offer = schemas if round_number < MAX_ROUNDS else None
        calls: list[llm.ToolCall] = []
        round_text: list[str] = []
        try:
            stream = llm.stream(
                tier=ctx.tier,
                messages=messages,
                instance=ctx.instance,
                secrets=await ainstance_tier_secrets_get(instance=ctx.instance),
                tools=offer,
                stage="main",
                chat_id=ctx.chat.pk,
                without_vision=ctx.without_vision,
            )
            async for item in stream:
                if ctx.control.cancel.is_set():
                    result.status = "cancelled"
                    return
                if isinstance(item, llm.TextDelta):
                    text = result.take_text(item.text)
                    if text:
                        result.parts.append(text)
                        round_text.append(text)
                        yield ev.ReplyDelta(text=text)
                    if result.finish_reason == "length":
                        return
                elif isinstance(item, llm.ToolCall):
                    calls.append(item)
                elif isinstance(item, llm.Usage):
                    result.prompt_tokens += item.prompt_tokens
                    result.completion_tokens += item.completion_tokens
                elif isinstance(item, llm.Finish):
                    result.model = item.model
                    if item.reason == "length":
                        # The provider stopped at its token limit (max_tokens or its own).
                        result.finish_reason = "length"
                elif isinstance(item, llm.StreamError):
                    yield _provider_error(ctx, result, item.code)
                    return
        except llm.LLMError as exc:
            yield _provider_error(ctx, result, exc.code)
            return
        # No tools offered (the last round): calls the model makes anyway are not run.
        if not calls or offer is None:
            return
        if tool_context is None:
            tool_context = await _tool_context(ctx)
        messages.append(_assistant_tool_message("".join(round_text), calls))
        async for event in _run_tools(ctx, calls, tool_context, messages, result, tool_texts):
            yield event
        next_offer = schemas if round_number + 1 < MAX_ROUNDS else None
        await _tool_results_fit(ctx, messages, tool_texts, next_offer)


def _provider_error(ctx: MainContext, result: MainResult, code: str) -> ev.Error:
    # The frame says why, in words a user can act on (docs/protocol.md §8).
    reason = llm.failure_reason(code)
    result.status = "interrupted" if result.parts else "failed"
    result.error = ev.Error(
        code=ErrorCode.PROVIDER_ERROR,
        message=llm.FAILURE_REASONS[reason],
        chat_id=ctx.chat.pk,
        task_id=ctx.task_id,
        message_id=ctx.assistant_message_id,
        reason=reason,
    )
    return result.error


async def _tool_context(ctx: MainContext) -> ToolContext:
    return await atool_context_build(
        instance=ctx.instance,
        user_id=ctx.user_id,
        chat_id=ctx.chat.pk,
        tool_names=[spec.name for spec in ctx.tools],
    )


async def _tool_results_fit(
    ctx: MainContext,
    messages: list[dict[str, Any]],
    tool_texts: dict[str, tuple[str, str]],
    offer: Sequence[dict[str, Any]] | None,
) -> None:
    """Cut the turn's tool results to what the tier's context leaves for the next call."""
    context_tokens = await llm.context_tokens(tier=ctx.tier, instance=ctx.instance)
    prompts.tool_results_fit(messages, tool_texts, context_tokens=context_tokens, tools=offer or ())


def _assistant_tool_message(text: str, calls: Sequence[llm.ToolCall]) -> dict[str, Any]:
    # No text is None, as the chat format allows with tool calls: providers refuse "".
    return {
        "role": "assistant",
        "content": text if text.strip() else None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in calls
        ],
    }


@dataclass
class _Call:
    call: llm.ToolCall
    embed_id: str
    task: asyncio.Task[dict[str, Any]] | None = None


async def _run_tools(
    ctx: MainContext,
    calls: Sequence[llm.ToolCall],
    tool_context: ToolContext,
    messages: list[dict[str, Any]],
    result: MainResult,
    tool_texts: dict[str, tuple[str, str]],
) -> AsyncIterator[ev.ServerEvent]:
    """Run one round's calls; each call's screened result is recorded in ``tool_texts``
    and appended to ``messages`` as its tool message."""
    allowed = {spec.name for spec in ctx.tools}
    running: list[_Call] = []
    outputs: dict[str, dict[str, Any]] = {}
    for index, call in enumerate(calls):
        # The call's name is the model's: its error is screened like output (in a thread).
        if call.name not in allowed:
            refused = {"success": False, "error": f"tool {call.name} is not available"}
        elif index >= MAX_PARALLEL:
            refused = {"success": False, "error": "too many tool calls in one round"}
        else:
            running.append(_Call(call=call, embed_id=new_id()))
            continue
        outputs[call.id] = await asyncio.to_thread(screen_tool_output, refused)
    for item in running:
        await db_call(
            chat_services.embed_create,
            chat=ctx.chat,
            embed_id=item.embed_id,
            tool=item.call.name,
            message_id=ctx.assistant_message_id,
        )
        result.embed_ids.append(item.embed_id)
        item.task = asyncio.create_task(
            execute_tool(item.call.name, item.call.arguments, tool_context)
        )
        ctx.control.tool_tasks[item.embed_id] = item.task
        yield _status(ctx, item, "processing")
    try:
        pending = {item.task for item in running if item.task is not None}
        by_task = {item.task: item for item in running}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                item = by_task[task]
                # In a thread: the sentence classifier embeds the output (ms a sentence).
                output = await asyncio.to_thread(screen_tool_output, _outcome(ctx, item))
                outputs[item.call.id] = output
                async for event in _finish_embed(ctx, item, output):
                    yield event
    finally:
        for item in running:
            ctx.control.tool_tasks.pop(item.embed_id, None)
            if item.task is not None and not item.task.done():
                item.task.cancel()
    for call in calls:
        text = tool_output_text(outputs[call.id])
        tool_texts[call.id] = (call.name, text)
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": fence_tool_output(call.name, text)}
        )


def _outcome(ctx: MainContext, item: _Call) -> dict[str, Any]:
    assert item.task is not None
    if item.task.cancelled() or item.embed_id in ctx.control.cancelled_tools:
        return {"success": False, "error": "cancelled by the user", "cancelled": True}
    return item.task.result()


def _status(ctx: MainContext, item: _Call, status: str, **extra: Any) -> ev.SkillStatus:
    return ev.SkillStatus(
        chat_id=ctx.chat.pk,
        task_id=ctx.task_id,
        embed_id=item.embed_id,
        tool=item.call.name,
        status=status,
        **extra,
    )


async def _finish_embed(
    ctx: MainContext, item: _Call, output: dict[str, Any]
) -> AsyncIterator[ev.ServerEvent]:
    if output.get("cancelled"):
        status = "cancelled"
    else:
        status = "finished" if output.get("success") else "error"
    content = {
        "tool": item.call.name,
        "arguments": item.call.arguments,
        "result": output.get("result"),
        "error": output.get("error"),
        "screening": output.get("screening"),
    }
    await db_call(chat_services.embed_status_set, embed_id=item.embed_id, status=status)
    await chat_cache.embed_cache_put(
        user_id=ctx.user_id, chat_id=ctx.chat.pk, embed_id=item.embed_id, content=content
    )
    preview = (
        json.dumps(output.get("result"), ensure_ascii=False)[:PREVIEW_CHARS]
        if status == "finished"
        else None
    )
    error = str(output.get("error") or "")[:PREVIEW_CHARS] if status != "finished" else None
    yield ev.EmbedUpdate(
        embed_id=item.embed_id, status=status, content=json.dumps(content, ensure_ascii=False)
    )
    yield _status(ctx, item, status, preview=preview, error=error)
