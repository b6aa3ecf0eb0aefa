"""One turn: ``run_turn(request, control)``, an async generator of frozen events.

The three stages in order (docs/architecture.md §6): history (AI cache, or the client's
``chat.history`` after ``request_chat_history``), pre-processing (local; a model-based
safety check only on first messages or when a heuristic fired), main processing
(streamed, with tools; a first message's title is generated concurrently), then — with
the reply in the AI cache and the messages' statuses written — ``stream.done``, then
post-processing (``postprocess.done``).

Every interface renders these events its own way: the WebSocket runtime
(``pipeline.runtime``) numbers and coalesces ``ReplyDelta``; ``manage.py chat`` prints
them. Cancellation (``control.cancel``) ends the turn with status ``cancelled``; errors
end it with ``failed`` (or ``interrupted`` when text went out) after an ``error`` event.
A message the safety check rejects is answered with a canned reply in the user's
language, then an ``error`` ``safety_rejected`` naming the rejected user message right
before ``stream.done`` (status ``done``: the message is answered), then a
``postprocess.done`` without follow-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from chats import cache as chat_cache
from chats import selectors as chat_selectors
from chats import services as chat_services
from chats.models import Chat, ChatMode
from instances.models import Instance, Mate
from instances.selectors import mates_for_instance, prompt_sections_get
from memories import selectors as memory_selectors
from openmates import llm
from pipeline import events as ev
from pipeline import files as turn_files
from pipeline import postprocess as post
from pipeline import preprocess as pre
from pipeline import prompts, speculate, state
from pipeline.db import db_call
from pipeline.ids import new_id
from pipeline.mainprocess import MainContext, MainResult, respond
from pipeline.protocol import ErrorCode, error_for_exception, error_reason
from pipeline.runtime import TurnControl, on_orphan
from pipeline.safety_replies import safety_reply
from skills.registry import ToolSpec
from skills.selectors import enabled_skill_versions, enabled_tools_for_instance

logger = logging.getLogger(__name__)

HISTORY_WAIT_S = 120.0
HISTORY_TIMEOUT_MESSAGE = "The chat history did not arrive in time; try the message again."
# A turn reads the newest HISTORY_WINDOW_ENTRIES entries of the AI cache and uses them when
# they hold the branch's newest HISTORY_WINDOW_NEED messages (the prompt sends at most
# prompts.MAX_HISTORY): its cost stays flat as a chat grows. A branch further back (an
# edit far up) or a cache with older imported history reads the whole cache.
HISTORY_WINDOW_ENTRIES = 64
HISTORY_WINDOW_NEED = 2 * prompts.MAX_HISTORY
SAFETY_REJECTED_MESSAGE = (
    "The message was declined by the safety check; the reply explains this in your language."
)
TITLE_WAIT_S = 10.0
INSTANCE_CONTEXT_TTL_S = 10.0


# The chat's newest cached entries and notes, read beside a turn's accept, and
# pre-processing on a guess of what the accept finds (``pipeline.speculate``).
EarlyReads = asyncio.Task[
    tuple[chat_cache.CachedHistory, state.ChatNotes, speculate.Speculation | None]
]


@dataclass(frozen=True)
class TurnRequest:
    """Everything a turn needs, loaded before it starts (no lazy relations in async code).

    ``client_history``: messages the client sent with ``message.send`` (only for a chat
    the server has never seen). ``role``: the user's role in the instance.
    ``done_count``: the chat's ``done`` messages, counted by the call that accepted the
    turn (``None``: counted when the history loads). ``regenerate``: the turn answers an
    answered question again (``message.regenerate``): its answer is a new version and the
    question's status stays. ``files``: the files sent with the message, read in memory
    (``pipeline.files``; docs/protocol.md §13). ``branch``: the question's branch, read
    by the accept call (None: read when the history loads); ``early``: the chat's newest
    cached entries and notes, read beside the accept (:func:`early_reads_start`). Both
    are used only by a turn that did not wait in the chat's queue.
    """

    task_id: str
    user_id: int
    chat: Chat  # its instance loaded with it (``chats.selectors``)
    instance: Instance
    role: str
    message_id: str
    assistant_message_id: str
    content: str
    client_history: tuple[dict[str, Any], ...] | None = None
    requested_tier: str | None = None
    requested_tools: tuple[str, ...] | None = None
    requested_mate: str | None = None
    done_count: int | None = None
    regenerate: bool = False
    files: tuple[turn_files.TurnFile, ...] = ()
    branch: chat_selectors.Branch | None = None
    early: EarlyReads | None = None


def early_reads_start(
    *,
    user_id: int,
    chat_id: str,
    content: str | None = None,
    guess: speculate.Guess | None = None,
    requested_tier: str | None = None,
    requested_tools: Sequence[str] | None = None,
) -> EarlyReads:
    """Start a turn's Redis reads before its accept call returns: the newest
    ``HISTORY_WINDOW_ENTRIES`` of the chat's AI cache and its notes, and, given the
    message's ``content``, its sentence vectors (``preprocess.tool_vectors_prefetch``, in
    a thread: a new message's embedding takes milliseconds, which then pass while the
    accept is in PostgreSQL). The keys are the user's own (``chat_id`` as the client sent
    it: a chat that is not theirs has none), so nothing is read that the user may not
    see. With a ``guess`` of the chat's instance and the user's role
    (``speculate.guess_for``) and the client's overrides, pre-processing then runs on
    what was read (``pipeline.speculate``). Hand the task to the turn
    (``TurnRequest.early``) or to :func:`early_reads_drop`."""

    # The vectors are the longest of these reads: their thread is asked for first, before
    # the accept's thread takes the GIL.
    vectors = None
    if content:
        vectors = asyncio.get_running_loop().run_in_executor(
            None, pre.tool_vectors_prefetch, content
        )
        vectors.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def read() -> tuple[
        chat_cache.CachedHistory, state.ChatNotes, speculate.Speculation | None
    ]:
        cached, notes, _ = await asyncio.gather(
            chat_cache.ai_history_read(
                user_id=user_id, chat_id=chat_id, newest=HISTORY_WINDOW_ENTRIES
            ),
            state.chat_notes_load(user_id=user_id, chat_id=chat_id),
            vectors if vectors is not None else _nothing(),
        )
        speculation = None
        if guess is not None and content:
            speculation = _speculate(guess, content, cached, notes, requested_tier, requested_tools)
        return cached, notes, speculation

    return asyncio.ensure_future(read())


def _speculate(
    guess: speculate.Guess,
    content: str,
    cached: chat_cache.CachedHistory,
    notes: state.ChatNotes,
    requested_tier: str | None,
    requested_tools: Sequence[str] | None,
) -> speculate.Speculation | None:
    """Pre-processing of a follow-up on ``guess`` and the early reads, or None when the
    instance's context is not in this process's cache (no database call is made here)."""
    context = _instance_contexts.get(guess.instance.pk)
    if context is None or time.monotonic() - context.loaded_at >= INSTANCE_CONTEXT_TTL_S:
        return None
    inputs = speculate.PreprocessInputs.of(
        content=content,
        instance=guess.instance,
        candidates=context.candidates,
        mate_categories=[m.category for m in context.mates],
        role=guess.role,
        previous_assistant=speculate.previous_answer(cached.messages),
        requested_tier=requested_tier,
        requested_tools=requested_tools,
        fallback_language=notes.language,
    )
    return speculate.Speculation(inputs=inputs, decided=inputs.run(guess.instance))


async def _nothing() -> None:
    return None


def early_reads_drop(early: EarlyReads | None) -> None:
    """Cancel reads no turn will use, their outcome (an error too) left unreported."""
    if early is None:
        return
    early.cancel()
    early.add_done_callback(lambda done: done.cancelled() or done.exception())


@dataclass(frozen=True)
class InstanceContext:
    """The instance configuration a turn reads (cached ``INSTANCE_CONTEXT_TTL_S``).

    ``context_tokens``: each tier's input context in tokens (``llm.context_tokens``).
    """

    tools: tuple[ToolSpec, ...]
    candidates: tuple[pre.ToolCandidate, ...]
    skill_prompts: tuple[dict[str, Any], ...]
    mates: tuple[Mate, ...]
    sections: dict[str, str]
    context_tokens: dict[str, int] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.monotonic)

    def skill_prompts_for(self, tool_names: Sequence[str]) -> list[dict[str, Any]]:
        wanted = set(tool_names)
        return [s for s in self.skill_prompts if wanted.intersection(s["tool_names"])]


def _instance_context_load(instance: Instance) -> InstanceContext:
    tools = enabled_tools_for_instance(instance)
    versions = enabled_skill_versions(instance)
    hints: dict[str, list[str]] = {}
    for version in versions:
        for name in version.tool_names:
            hints.setdefault(name, []).append(f"{version.description} {version.preprocessing_hint}")
    return InstanceContext(
        tools=tuple(tools),
        candidates=tuple(
            pre.ToolCandidate(
                name=t.name, description=t.description, hint=" ".join(hints.get(t.name, []))
            )
            for t in tools
        ),
        skill_prompts=tuple(
            {"name": v.skill.name, "instructions": v.instructions, "tool_names": list(v.tool_names)}
            for v in versions
        ),
        mates=tuple(mates_for_instance(instance)),
        sections=prompt_sections_get(instance),
    )


_instance_contexts: dict[int, InstanceContext] = {}


async def instance_context_get(instance: Instance) -> InstanceContext:
    """The instance's tools, skills, mates and prompt sections (one sync call when cold)."""
    cached = _instance_contexts.get(instance.pk)
    if cached is not None and time.monotonic() - cached.loaded_at < INSTANCE_CONTEXT_TTL_S:
        return cached
    loaded = await db_call(_instance_context_load, instance)
    for tier in llm.TIERS:
        loaded.context_tokens[tier] = await llm.context_tokens(tier=tier, instance=instance)
    _instance_contexts[instance.pk] = loaded
    return loaded


def instance_context_forget() -> None:
    """Drop the in-process instance configuration cache (tests, config changes)."""
    _instance_contexts.clear()


class _TurnError(Exception):
    def __init__(self, error: ev.Error) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class _Progress:
    result: MainResult = field(default_factory=MainResult)
    language: str = "en"
    # The tools pre-processing offered the model (names), kept with the answer.
    tools: tuple[str, ...] = ()
    history: list[dict[str, Any]] = field(default_factory=list)
    notes: state.ChatNotes = field(default_factory=state.ChatNotes)
    # The history came from the client (``chat.history``), which may also have changed
    # the notes: they are read again after it.
    history_from_client: bool = False
    # The chat's messages off the question's branch and its done messages on it
    # (``chats.selectors.Branch``).
    off_branch: frozenset[str] = frozenset()
    path: tuple[str, ...] = ()
    # ``history`` is the newest part of a long branch (``HISTORY_WINDOW_ENTRIES``).
    history_partial: bool = False
    rejected: bool = False
    # The message as the AI cache keeps it: with its files' text (``pipeline.files``).
    question_text: str | None = None
    # The main call's messages for a model that does not see images, when the question
    # carries image parts (``pipeline.files.blind_messages``).
    without_vision: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    # The question's retry copy being saved (``state.pending_content_save``).
    kept: asyncio.Future[None] | None = None
    title_task: asyncio.Task[pre.ChatTitle | None] | None = None
    # ``time.perf_counter()`` when the title call started (for the fallback's log line).
    title_started: float | None = None
    # What the title is made from (``_Plan.title_text``), for the heuristic fallback.
    title_text: str | None = None
    # Pre-processing run beside the accept call on a guess (``pipeline.speculate``).
    speculation: speculate.Speculation | None = None


async def run_turn(request: TurnRequest, control: TurnControl) -> AsyncIterator[ev.ServerEvent]:
    """The turn's events, ending with ``stream.done`` (and ``postprocess.done`` when done)."""
    progress = _Progress()
    try:
        if control.cancel.is_set():
            await _queued_text_keep(request)
        else:
            async for event in _answer(request, control, progress):
                yield event
    except asyncio.CancelledError:
        if not control.cancel.is_set():
            raise
        _uncancel()
    except Exception as exc:
        yield _failed(request, progress.result, exc)
    finally:
        if progress.title_task is not None and not progress.title_task.done():
            progress.title_task.cancel()
        if request.early is not None and not request.early.done():
            early_reads_drop(request.early)
    if control.cancel.is_set():
        progress.result.status = "cancelled"
    control.finishing = True
    result = progress.result
    try:
        await _finalize(request, progress)
    except Exception as exc:
        result.status = "failed"
        result.error = _error_for(request, exc)
        yield result.error
    if progress.rejected and result.status == "done":
        # The canned reply is the answer (status done); the error says why, just before.
        yield ev.Error(
            code=ErrorCode.SAFETY_REJECTED,
            message=SAFETY_REJECTED_MESSAGE,
            chat_id=request.chat.pk,
            task_id=request.task_id,
            message_id=request.message_id,  # the rejected user message
        )
    yield ev.StreamDone(
        chat_id=request.chat.pk,
        task_id=request.task_id,
        message_id=request.assistant_message_id,
        content=result.content,
        model=result.model,
        usage=result.usage,
        status=result.status,
        finish_reason=result.finish_reason,
        language=progress.language,
        reason=_failure_reason(result),
    )
    if result.status != "done":
        return
    if progress.rejected:
        # No post-processing of a rejected message, but the ordering docs/protocol.md §5 promises.
        yield ev.PostprocessDone(
            chat_id=request.chat.pk, task_id=request.task_id, follow_ups=(), memories_saved=0
        )
    elif not post.is_automated(request.content):
        yield await _postprocess(request, progress)


async def _queued_text_keep(request: TurnRequest) -> None:
    """A turn cancelled while queued keeps its text for ``message.retry`` as a running
    turn's is kept (``_answer`` saves it), until the message is answered; not when the
    cancel came from the chat's deletion."""
    if not await state.chat_deleted(request.chat.pk):
        await state.pending_content_save(
            user_id=request.user_id, message_id=request.message_id, content=request.content
        )


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _failed(request: TurnRequest, result: MainResult, exc: Exception) -> ev.Error:
    """End the turn's answer ``failed`` (``interrupted`` once it has text) because of
    ``exc``; returns the ``error`` event, kept on ``result``."""
    result.status = "interrupted" if result.parts else "failed"
    result.error = exc.error if isinstance(exc, _TurnError) else _error_for(request, exc)
    return result.error


def _failure_reason(result: MainResult) -> str | None:
    """Why a failed or interrupted answer ended: its error's reason (docs/protocol.md §8),
    None for another status or an error without one."""
    if result.status not in ("failed", "interrupted") or result.error is None:
        return None
    return result.error.reason


def _error_for(request: TurnRequest, exc: BaseException) -> ev.Error:
    code, message = error_for_exception(exc, doing=f"turn {request.task_id}")
    return ev.Error(
        code=code,
        message=message,
        chat_id=request.chat.pk,
        task_id=request.task_id,
        message_id=request.assistant_message_id,
        reason=error_reason(exc),
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    """What pre-processing decided for the turn's message (``decided``), the mate it
    chose, whether it is the chat's first message, whether model-based pre-processing
    runs (``use_model``) and the text the chat's title is made from (None: the chat has
    one, or gets it from its client: :func:`_title_text`)."""

    decided: pre.Preprocessed
    mate: Mate | None
    first: bool
    use_model: bool
    title_text: str | None = None


def _side_reads(request: TurnRequest, control: TurnControl) -> asyncio.Future[Any]:
    """The instance context and the message's vectors, loading while the history does;
    the future gives ``[context, None]``. The vectors were started with the early reads
    unless the turn waited in the chat's queue (whose reads are made again)."""
    vectors_early = request.early is not None and not control.queued
    return asyncio.gather(
        instance_context_get(request.instance),
        _nothing()
        if vectors_early
        else asyncio.to_thread(pre.tool_vectors_prefetch, request.content),
    )


async def _answer(
    request: TurnRequest, control: TurnControl, progress: _Progress
) -> AsyncIterator[ev.ServerEvent]:
    """The turn up to the end of its reply: the history (with the notes and the instance
    context read meanwhile), pre-processing and the safety step, then the reply streamed
    from the prompt, with a first message's title arriving beside it."""
    chat = request.chat
    _kept_start(request, progress)
    side = _side_reads(request, control)
    try:
        async for event in _load_history(request, control, progress):
            yield event
    finally:
        context, _ = await side
    if progress.history_from_client:
        progress.notes = await state.chat_notes_load(user_id=request.user_id, chat_id=chat.pk)
    if progress.notes.summary_covers in progress.off_branch:
        # A summary of another branch (before an edit) is not this branch's; it is made again.
        progress.notes = replace(progress.notes, summary=None, summary_covers=None)
    plan = _plan(request, progress, context)
    safety, plan = await asyncio.gather(
        _safety_check(request, plan), _model_tools(request, plan, context)
    )
    categories, ask = await _memory_consent(request, plan.decided.memory_categories)
    if ask:
        yield ev.MemoryRequest(chat_id=chat.pk, request_id=new_id(), categories=tuple(ask))
    yield _preprocess_done(request, progress, plan, safety)
    if safety.rejected:
        yield _rejection(progress, plan.decided.language)
        return
    _title_start(request, progress, plan)
    tools = [t for t in context.tools if t.name in plan.decided.tools]
    messages = await _prompt_build(request, progress, context, plan, tools, categories)
    # Kept before the model is asked: a key that cannot seal it fails the turn here (and
    # is reported once: _kept_wait finds nothing left to wait for).
    kept, progress.kept = progress.kept, None
    if kept is not None:
        await kept
    main = MainContext(
        chat=chat,
        instance=request.instance,
        user_id=request.user_id,
        task_id=request.task_id,
        assistant_message_id=request.assistant_message_id,
        tier=plan.decided.tier,
        tools=tools,
        control=control,
        without_vision=progress.without_vision,
    )
    async for event in respond(main, messages, progress.result):
        yield event
        if (title := _title_event(request, progress)) is not None:
            yield title
    if (title := await _title_wait(request, progress)) is not None:
        yield title


def _plan(request: TurnRequest, progress: _Progress, context: InstanceContext) -> _Plan:
    """Pre-processing's local decisions for the message (``preprocess.preprocess``, or
    the same decision made beside the accept call: ``pipeline.speculate``)."""
    history = progress.history
    inputs = speculate.PreprocessInputs.of(
        content=request.content,
        instance=request.instance,
        candidates=context.candidates,
        mate_categories=[m.category for m in context.mates],
        role=request.role,
        previous_assistant=speculate.previous_answer(history),
        requested_tier=request.requested_tier,
        requested_tools=request.requested_tools,
        fallback_language=progress.notes.language,
    )
    decided = speculate.preprocessed(inputs, request.instance, progress.speculation)
    if decided.tools and llm.is_base_model(tier=decided.tier, instance=request.instance):
        # A base model gets no tools (openmates.llm): none is offered, nor shown as offered.
        decided = replace(decided, tools=(), tool_reasons=())
    progress.language = decided.language
    progress.tools = decided.tools
    return _Plan(
        decided=decided,
        mate=_mate_choose(context.mates, decided.mate_category, request.requested_mate),
        first=not history,
        use_model=(
            request.instance.model_preprocessing_enabled and not _on_base_model(request.instance)
        ),
        title_text=_title_text(request, progress, decided.content),
    )


def _title_text(request: TurnRequest, progress: _Progress, content: str) -> str | None:
    """What the chat's title is made from: the message of a chat's first turn; for a
    server-managed chat still without a title (a ``/v1`` conversation that arrived with
    earlier messages), its first user message; None otherwise."""
    history = progress.history
    if not history:
        return content
    untitled = (
        request.chat.mode == ChatMode.SERVER_MANAGED
        and request.chat.server_title is None
        and not progress.notes.title
    )
    if not untitled:
        return None
    first = next((m for m in history if m.get("role") == "user"), None)
    return pre.strip_invisible(str(first["content"])) if first else content


async def _safety_check(request: TurnRequest, plan: _Plan) -> pre.SafetyScores:
    """The heuristic scores, or the model's on a first message or when a heuristic fired
    (the heuristic ones again when that call fails)."""
    heuristic = plan.decided.safety
    if not plan.use_model or not (plan.first or heuristic.heuristic_fired):
        return heuristic
    scored = await pre.model_safety_check(
        text=plan.decided.content, instance=request.instance, chat_id=request.chat.pk
    )
    return scored or heuristic


async def _model_tools(request: TurnRequest, plan: _Plan, context: InstanceContext) -> _Plan:
    """The plan with the fast tier's tool picks added, on first messages of instances
    with ``model_tool_preselection`` (beside the safety check: ``pre.amodel_tools_merge``)."""
    if not (plan.first and plan.use_model and request.instance.model_tool_preselection):
        return plan
    decided = await pre.amodel_tools_merge(
        plan.decided,
        candidates=context.candidates,
        instance=request.instance,
        chat_id=request.chat.pk,
    )
    return replace(plan, decided=decided)


def _preprocess_done(
    request: TurnRequest, progress: _Progress, plan: _Plan, safety: pre.SafetyScores
) -> ev.PreprocessDone:
    """The ``preprocess.done`` of the decisions; a first message without the title call
    gets its heuristic title here (and in the notes)."""
    decided = plan.decided
    heuristic = None
    if plan.title_text is not None and not plan.use_model:
        heuristic = pre.heuristic_title(plan.title_text)
        progress.notes = replace(progress.notes, title=heuristic.title)
    return ev.PreprocessDone(
        chat_id=request.chat.pk,
        task_id=request.task_id,
        language=decided.language,
        tier=decided.tier,
        model=decided.model,
        reason="safety_rejected" if safety.rejected else decided.reason,
        tools=decided.tools,
        tool_reasons=dict(zip(decided.tools, decided.tool_reasons, strict=False)),
        mate=plan.mate.name if plan.mate else "",
        title=heuristic.title if heuristic else None,
        icon=heuristic.icon if heuristic else None,
        category=heuristic.category if heuristic else None,
        tags=heuristic.tags if heuristic else None,
    )


def _rejection(progress: _Progress, language: str) -> ev.ReplyDelta:
    """A rejected message's answer: the canned reply in its language, no model call."""
    progress.rejected = True
    text = safety_reply(language)
    progress.result.parts.append(text)
    progress.result.model = "safety"
    return ev.ReplyDelta(text=text)


def _title_start(request: TurnRequest, progress: _Progress, plan: _Plan) -> None:
    """A first message's title call, running beside the main call."""
    if plan.title_text is not None and plan.use_model:
        progress.title_started = time.perf_counter()
        progress.title_text = plan.title_text
        progress.title_task = asyncio.create_task(
            pre.title_generate(
                text=plan.title_text,
                language=plan.decided.language,
                instance=request.instance,
                chat_id=request.chat.pk,
            )
        )


async def _prompt_build(
    request: TurnRequest,
    progress: _Progress,
    context: InstanceContext,
    plan: _Plan,
    tools: Sequence[ToolSpec],
    memory_categories: Sequence[str],
) -> list[dict[str, Any]]:
    """The main call's messages: the system prompt, the rolling summary, as much history
    as the tier's context leaves room for, and the message (docs/architecture.md §6)."""
    decided = plan.decided
    memories = await prompts.memories_retrieve(
        user_id=request.user_id,
        instance=request.instance,
        query=decided.content,
        categories=list(memory_categories),
    )
    system = _system_text(request, progress, context, plan, tools, memories)

    async def load_embed(embed_id: str) -> dict[str, Any] | None:
        return await chat_cache.embed_cache_get(user_id=request.user_id, embed_id=embed_id)

    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    messages += prompts.summary_exchange(progress.notes.summary)
    question = await _question(request, progress, decided, context.context_tokens[decided.tier])
    # Images count as IMAGE_TOKENS each, not as their base64.
    sized = {"role": "user", "content": progress.question_text or decided.content}
    budget = prompts.history_budget_tokens(
        context_tokens=context.context_tokens[decided.tier],
        fixed_messages=[*messages, sized],
        tools=[t.llm_schema() for t in tools],
    )
    budget -= sum(turn_files.IMAGE_TOKENS for f in request.files if f.kind == "image")
    budget = max(0, budget)
    # A base model given earlier answers continues the transcript by repeating one of them
    # (the bundled 270M model answered every later question with its first answer).
    if not llm.is_base_model(tier=decided.tier, instance=request.instance):
        messages += await prompts.history_messages(
            progress.history, load_embed=load_embed, budget_tokens=budget
        )
    messages.append(question)
    return messages


def _system_text(
    request: TurnRequest,
    progress: _Progress,
    context: InstanceContext,
    plan: _Plan,
    tools: Sequence[ToolSpec],
    memories: Sequence[str],
) -> str:
    """The system prompt, or for a base model the short header it can continue
    (``prompts.base_model_header``)."""
    decided = plan.decided
    if llm.is_base_model(tier=decided.tier, instance=request.instance):
        return prompts.base_model_header(
            name=request.instance.name,
            now=datetime.now(tz=UTC),
            language=decided.language,
            memories=memories,
        )
    return prompts.system_prompt_build(
        sections=context.sections,
        mate=plan.mate,
        skill_prompts=context.skill_prompts_for(decided.tools),
        now=datetime.now(tz=UTC),
        language=decided.language,
        memories=memories,
        has_tools=bool(tools) or prompts.history_has_tool_output(progress.history),
    )


async def _question(
    request: TurnRequest, progress: _Progress, decided: pre.Preprocessed, context_tokens: int
) -> dict[str, Any]:
    """The turn's user message for the model: its text, with the files' text cut to
    their share of the tier's context and the images as ``image_url`` parts; notes in
    ``progress.question_text`` what the AI cache keeps of it and, when it has images, in
    ``progress.without_vision`` the messages for a tier entry whose model does not see
    them (a note in each image's place): the gateway decides per entry, so a fallback
    without vision, and always a base model, gets text (docs/protocol.md §13)."""
    if not request.files:
        return {"role": "user", "content": decided.content}
    budget = turn_files.files_budget_tokens(
        context_tokens=context_tokens,
        reserve_tokens=prompts.answer_reserve_tokens(context_tokens),
    )
    progress.question_text = turn_files.history_text(
        decided.content, request.files, budget_tokens=budget
    )
    content = turn_files.user_content(
        decided.content, request.files, vision=True, budget_tokens=budget
    )
    question = {"role": "user", "content": content}
    if isinstance(content, list):
        blind = turn_files.user_content(
            decided.content, request.files, vision=False, budget_tokens=budget
        )
        progress.without_vision = turn_files.blind_messages(question, str(blind))
    return question


async def _title_wait(request: TurnRequest, progress: _Progress) -> ev.PreprocessDone | None:
    """The title's ``preprocess.done`` once the reply has ended: the model's title when its
    call ends within ``TITLE_WAIT_S``, else (the call still running, or failed in any
    way) the heuristic title, so a first answer never leaves the chat "New chat"."""
    task = progress.title_task
    if task is None:
        return None
    timed_out = False
    # The call's own failure is read (and logged) by _title_event.
    with contextlib.suppress(Exception):
        try:
            await asyncio.wait_for(asyncio.shield(task), TITLE_WAIT_S)
        except TimeoutError:
            timed_out = True
    if timed_out:
        task.cancel()
        progress.title_task = None
        reason = f"the title call did not end within {TITLE_WAIT_S:g} s of the reply"
        return _title_done(request, progress, _title_heuristic(request, progress, reason))
    return _title_event(request, progress)


def _title_event(request: TurnRequest, progress: _Progress) -> ev.PreprocessDone | None:
    """The title's ``preprocess.done`` when its call has ended (None while it runs): the
    model's title, or the heuristic one when the call failed or was cancelled."""
    task = progress.title_task
    if task is None or not task.done():
        return None
    progress.title_task = None
    if task.cancelled():
        made = _title_heuristic(request, progress, "the title call was cancelled")
    elif (failure := task.exception()) is not None:
        made = _title_heuristic(request, progress, f"the title call failed: {failure!r}")
    else:
        made = task.result() or _title_heuristic(request, progress, "the title call gave none")
    return _title_done(request, progress, made)


def _title_heuristic(request: TurnRequest, progress: _Progress, reason: str) -> pre.ChatTitle:
    """The heuristic title of the message (``pre.title_fallback``: logged with ``reason``)."""
    started = progress.title_started or time.perf_counter()
    text = progress.title_text or pre.strip_invisible(request.content)
    return pre.title_fallback(text, request.chat.pk, reason, started)


def _title_done(
    request: TurnRequest, progress: _Progress, made: pre.ChatTitle
) -> ev.PreprocessDone:
    """The ``preprocess.done`` naming the chat ``made`` (kept in the notes too)."""
    progress.notes = replace(progress.notes, title=made.title)
    return ev.PreprocessDone(
        chat_id=request.chat.pk,
        task_id=request.task_id,
        language=progress.language,
        tier="fast",
        model="",
        reason="title",
        tools=(),
        mate="",
        title=made.title,
        icon=made.icon,
        category=made.category,
        tags=made.tags,
    )


def _on_base_model(instance: Instance) -> bool:
    """Whether the model-based pre- and post-processing steps are skipped: each is a
    fast-tier call with a JSON schema, which a base model (the bundled local one, behind
    a completions endpoint) cannot follow (docs/architecture.md §6)."""
    return llm.is_base_model(tier="fast", instance=instance)


def _mate_choose(mates: Sequence[Mate], category: str | None, requested: str | None) -> Mate | None:
    for mate in mates:
        if requested and requested in (mate.name, mate.category):
            return mate
    for mate in mates:
        if category and mate.category == category:
            return mate
    return mates[0] if mates else None


async def _memory_consent(
    request: TurnRequest, wanted: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(allowed categories, categories to ask about now)`` (docs/architecture.md §12).

    Only categories in which the user has memories count (``memory.request`` never asks
    about one nothing can supply); each is asked about once per chat, and the turn goes
    on without it until the answer. The chat's answers come from Redis (the durable copy
    after the Redis one expired, ``state.memory_consent_load``); the user's
    categories (one or two short queries) only when a wanted category is undecided or
    allowed, so a chat whose answers are all "no" costs no database work.

    A server-managed chat (``/v1``, ``manage.py chat``, a channel) has no client to ask:
    its user is whoever holds the credential (an API key's or a channel person's
    pseudo-user, or a user's own token), so every category not refused for the chat
    counts as allowed and nothing is asked; the instance's and the user's memory
    switches still decide.
    """
    if not wanted or not request.instance.memory_enabled:
        return [], []
    consent = await state.memory_consent_load(request.chat.pk)
    server_managed = request.chat.mode == ChatMode.SERVER_MANAGED
    if server_managed:
        consent = {c: "denied" if consent.get(c) == "denied" else "allowed" for c in wanted}
    if not any(c not in consent or consent[c] == "allowed" for c in wanted):
        return [], []
    held = await db_call(
        memory_selectors.memory_categories_askable,
        instance=request.instance,
        user_id=request.user_id,
    )
    relevant = [c for c in wanted if held.get(c)]
    ask = [c for c in relevant if c not in consent]
    await state.memory_consent_mark(request.chat.pk, dict.fromkeys(ask, "asked"))
    allowed = memory_selectors.memory_categories_consented(
        consent, relevant, server_managed=server_managed
    )
    return allowed, ask


async def _load_history(
    request: TurnRequest, control: TurnControl, progress: _Progress
) -> AsyncIterator[ev.ServerEvent]:
    """Fill ``progress.history``; on a miss ask the client and wait for ``chat.history``."""
    chat = request.chat
    branch, cached, progress.notes, progress.speculation = await _reads(request, control)
    loaded = cached.along(branch.path, branch.off_branch, need=HISTORY_WINDOW_NEED)
    if loaded.reason == chat_cache.WINDOW_SHORT:
        cached = await chat_cache.ai_history_read(user_id=request.user_id, chat_id=chat.pk)
        loaded = cached.along(branch.path, branch.off_branch)
    progress.history_partial = cached.skipped > 0
    progress.path = branch.path
    expected = len(branch.path)
    progress.off_branch = branch.off_branch
    # The client's history counts when the server holds none: a miss, or a chat it has
    # never answered (an imported one has no done messages, so its empty cache is no miss).
    if not loaded.messages and request.client_history:
        await chat_cache.ai_history_store(
            user_id=request.user_id, chat_id=chat.pk, messages=list(request.client_history)
        )
        stored = await chat_cache.ai_history_read(user_id=request.user_id, chat_id=chat.pk)
        loaded = stored.along(branch.path, branch.off_branch)
    if loaded.messages is None:
        request_id = new_id()
        await state.history_request_save(
            request_id=request_id, user_id=request.user_id, chat_id=chat.pk, task_id=request.task_id
        )
        control.history.clear()
        yield ev.RequestChatHistory(
            chat_id=chat.pk,
            request_id=request_id,
            reason=loaded.reason or "cache_miss",
            expected_messages=expected,
        )
        try:
            await asyncio.wait_for(control.history.wait(), HISTORY_WAIT_S)
        except TimeoutError:
            raise _TurnError(
                ev.Error(
                    code=ErrorCode.HISTORY_TIMEOUT,
                    message=HISTORY_TIMEOUT_MESSAGE,
                    chat_id=chat.pk,
                    task_id=request.task_id,
                )
            ) from None
        # What the client sent is all it holds: the branch's part of it, whatever is missing.
        answered = await chat_cache.ai_history_read(user_id=request.user_id, chat_id=chat.pk)
        loaded = answered.along((), branch.off_branch)
        progress.history_from_client = True
    progress.history = list(loaded.messages or [])


async def _reads(
    request: TurnRequest, control: TurnControl
) -> tuple[
    chat_selectors.Branch, chat_cache.CachedHistory, state.ChatNotes, speculate.Speculation | None
]:
    """The question's branch, the chat's newest cached entries and its notes, and
    pre-processing on a guess: those the accept call and :func:`early_reads_start` read
    when the turn did not wait in the chat's queue (the turns before it changed them
    meanwhile), else read now, at once (and no guess)."""
    early = request.early
    if early is not None and not control.queued:
        branch = await _branch(request, control)
        cached, notes, speculation = await early
        return branch, cached, notes, speculation
    early_reads_drop(early)
    branch, (cached, notes, _) = await asyncio.gather(
        _branch(request, control),
        early_reads_start(user_id=request.user_id, chat_id=request.chat.pk),
    )
    return branch, cached, notes, None


async def _branch(request: TurnRequest, control: TurnControl) -> chat_selectors.Branch:
    """The branch the turn's question continues (``chats.selectors.message_branch``): the
    accept call's when the turn did not wait in the chat's queue (the turns before it
    answered meanwhile); no query for a chat with no done message then either."""
    if not control.queued and request.branch is not None:
        return request.branch
    if request.done_count == 0 and not control.queued:
        return chat_selectors.NO_BRANCH
    return await db_call(
        chat_selectors.message_branch, chat_id=request.chat.pk, message_id=request.message_id
    )


async def _finalize(request: TurnRequest, progress: _Progress) -> None:
    """Reply into the AI cache, statuses and the kept reply into PostgreSQL.

    A chat deleted meanwhile gets none of it back, and the turn ends ``cancelled``.
    """
    result = progress.result
    chat = request.chat
    await _kept_wait(request, progress)
    if await state.chat_deleted(chat.pk):
        result.status = "cancelled"
        return
    if result.status == "done":
        user_entry = {
            "message_id": request.message_id,
            "role": "user",
            "content": progress.question_text or request.content,
        }
        reply_entry = {
            "message_id": request.assistant_message_id,
            "role": "assistant",
            "content": result.content,
            "embeds": list(result.embed_ids),
        }
        await chat_cache.ai_history_extend(
            user_id=request.user_id, chat_id=chat.pk, messages=[user_entry, reply_entry]
        )
        await state.pending_content_drop(request.message_id)
        progress.notes = replace(progress.notes, language=progress.language)
        await state.chat_notes_save(user_id=request.user_id, chat_id=chat.pk, notes=progress.notes)
    try:
        await db_call(
            chat_services.turn_finish,
            chat=chat,
            message_id=request.message_id,
            assistant_message_id=request.assistant_message_id,
            status=result.status,
            content=request.content,
            reply=result.content,
            model=result.model,
            usage=result.usage,
            title=progress.notes.title,
            question_kept=request.regenerate,
            failure_reason=_failure_reason(result) or "",
            language=progress.language or "",
            tools_offered=progress.tools,
        )
    except chat_services.NotFound:
        # Deleted between the check above and now; the runtime drops what was cached.
        result.status = "cancelled"


def _kept_start(request: TurnRequest, progress: _Progress) -> None:
    """Save the question's retry copy while the history loads and pre-processing runs
    (``_answer`` awaits it before the model call, :func:`_kept_wait` at the end)."""
    progress.kept = asyncio.ensure_future(
        state.pending_content_save(
            user_id=request.user_id, message_id=request.message_id, content=request.content
        )
    )
    progress.kept.add_done_callback(lambda done: done.cancelled() or done.exception())


async def _kept_wait(request: TurnRequest, progress: _Progress) -> None:
    """Wait for the question's retry copy (before a done turn drops it); failing to keep
    it is logged, it does not fail the turn: only a retry would have read it."""
    if progress.kept is None:
        return
    try:
        await progress.kept
    except Exception:
        logger.warning(
            "turn %s: the question's retry copy was not kept", request.task_id, exc_info=True
        )


async def _postprocess(request: TurnRequest, progress: _Progress) -> ev.PostprocessDone:
    instance = request.instance
    use_model = instance.follow_ups_enabled and not _on_base_model(instance)
    history = await _summary_history(request, progress) if use_model else progress.history
    conversation = [
        {"message_id": str(m.get("message_id", "")), "role": m["role"], "content": m["content"]}
        for m in history
        if m.get("role") in ("user", "assistant")
    ]
    conversation += [
        {"message_id": request.message_id, "role": "user", "content": request.content},
        {
            "message_id": request.assistant_message_id,
            "role": "assistant",
            "content": progress.result.content,
        },
    ]
    try:
        context = await instance_context_get(instance)
        done = await post.postprocess(
            instance=instance,
            chat_id=request.chat.pk,
            user_id=request.user_id,
            language=progress.language,
            title=progress.notes.title,
            summary=progress.notes.summary,
            summary_covers=progress.notes.summary_covers,
            conversation=conversation,
            fast_context_tokens=context.context_tokens["fast"],
            use_model=use_model,
        )
        if done.summary:
            progress.notes = replace(
                progress.notes, summary=done.summary, summary_covers=done.summary_covers
            )
        if done.title:
            progress.notes = replace(progress.notes, title=done.title)
        if (done.summary or done.title) and not await state.chat_deleted(request.chat.pk):
            await state.chat_notes_save(
                user_id=request.user_id, chat_id=request.chat.pk, notes=progress.notes
            )
    except Exception:
        logger.exception("post-processing failed for turn %s", request.task_id)
        done = post.Postprocessed()
    return ev.PostprocessDone(
        chat_id=request.chat.pk,
        task_id=request.task_id,
        follow_ups=done.follow_ups,
        memories_saved=done.memories_saved,
        summary=done.summary,
        title=done.title,
    )


async def _summary_history(request: TurnRequest, progress: _Progress) -> list[dict[str, Any]]:
    """The branch's history for post-processing's rolling summary: the turn's, unless
    that is the newest part of a long branch without the message the summary covers
    (the summary then folds older messages in), when the whole cache is read again."""
    covers = progress.notes.summary_covers
    if not progress.history_partial or any(
        str(m.get("message_id")) == covers for m in progress.history
    ):
        return progress.history
    try:
        cached = await chat_cache.ai_history_read(user_id=request.user_id, chat_id=request.chat.pk)
    except Exception:
        # Post-processing never fails a turn: the summary folds what the window holds.
        logger.warning("chat %s: the whole history was not read", request.chat.pk, exc_info=True)
        return progress.history
    return cached.along(progress.path, progress.off_branch).messages or progress.history


@on_orphan
async def _mark_orphan_failed(record: state.TaskRecord) -> None:
    """The reaper's part for turns: the unfinished messages of a dead process's turn are
    failed (``chats.services.turn_fail``)."""
    await db_call(
        chat_services.turn_fail,
        message_id=record.message_id,
        assistant_message_id=record.assistant_message_id,
    )
