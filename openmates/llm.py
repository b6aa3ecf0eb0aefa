"""The LLM gateway: the only module that imports LiteLLM.

Every model and embedding call in OpenMates goes through here:

* :func:`complete` and :func:`stream` take a tier (``fast``, ``standard``, ``heavy``) and
  walk the instance's fallback list for it (``instance.tier_map``, docs/architecture.md §3), else
  ``settings.LLM_DEFAULT_TIERS``. Keys are passed to LiteLLM explicitly: an instance's
  entries name its secrets, whose values the caller resolves and passes in
  (``secrets=``; ``instances.services.ainstance_tier_secrets_get``), the settings' entries
  name environment variables. This module imports no app. Retryable errors (429, 5xx,
  connection errors, a provider's "tool not in request" 400, a stream cut before anything
  was shown) are retried with backoff, then the next entry is tried; once visible text
  has been yielded there is no fallback, the stream ends with a :class:`StreamError`
  instead.
* :func:`embed` embeds texts with the instance's embedding model; ``local/…`` models
  run in-process (:mod:`openmates.embeddings`), anything else goes through LiteLLM.
* Every attempt is logged as an ``AICall`` row (ids, tokens, cost, latency, outcome;
  never text) by a writer thread (:mod:`openmates.llm_calllog`), so logging never
  delays the caller.

``import litellm`` takes seconds, so it is never done at import time of this module:
:func:`start_background_import` starts it in a thread at server start-up, and the first
call waits for it otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import httpx
from django.conf import settings

from openmates import embeddings
from openmates.env import env_secret
from openmates.llm_calllog import CallLogWriter
from openmates.llm_stream import (
    BASE_MODEL_STOP,
    Completion,
    Finish,
    LLMEvent,
    StreamError,
    StreamNormaliser,
    TextDelta,
    ToolCall,
    Usage,
    base_model_prompt,
    parse_tool_arguments,
    strip_tool_markup,
)

__all__ = [
    "Completion",
    "Finish",
    "LLMConfigurationError",
    "LLMError",
    "LLMEvent",
    "StreamError",
    "TextDelta",
    "ToolCall",
    "Usage",
    "aflush_call_log",
    "complete",
    "context_tokens",
    "embed",
    "flush_call_log",
    "health",
    "is_base_model",
    "start_background_import",
    "stream",
]

# LiteLLM reads this when it is imported: use the price map bundled with the package
# instead of fetching one from the network (docs/architecture.md §1).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

logger = logging.getLogger(__name__)

TIERS = ("fast", "standard", "heavy")
# Stable codes of StreamError / LLMError.
ERROR_CODES = (
    "rate_limited",
    "provider_unavailable",
    "connection_error",
    "tool_not_in_request",
    "timeout",
    "auth_failed",
    "context_too_long",
    "bad_request",
    "invalid_json",
    "stream_cut",
    "provider_error",
    "configuration",  # LLMConfigurationError only
)
# Characters per token assumed when fitting a prompt into a local model's context; low
# on purpose (code and non-Latin scripts take more tokens per character).
_CHARS_PER_TOKEN = 2


class LLMError(Exception):
    """A model call failed after retries and fallbacks.

    ``code`` is one of :data:`ERROR_CODES`; ``str()`` never quotes the provider's text.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class LLMConfigurationError(LLMError):
    """The tier cannot be served: no entry, or every entry lacks its secret (named)."""

    def __init__(self, message: str, *, missing_secrets: tuple[str, ...] = ()) -> None:
        super().__init__("configuration", message)
        self.missing_secrets = missing_secrets


# --- LiteLLM import ------------------------------------------------------------------

_import_lock = threading.Lock()
_imported = threading.Event()
_litellm: ModuleType | None = None
_import_error: str | None = None


def _import_litellm() -> ModuleType:
    """Import and configure LiteLLM once (blocking; seconds on the first call)."""
    global _litellm, _import_error
    with _import_lock:
        if _litellm is not None:
            return _litellm
        try:
            import litellm
        except Exception as exc:
            _import_error = f"LiteLLM failed to import ({type(exc).__name__})"
            raise
        litellm.suppress_debug_info = True
        litellm.turn_off_message_logging = True
        litellm.telemetry = False
        # Parameters a provider does not take (e.g. tools for a completions endpoint)
        # are dropped rather than failing the call.
        litellm.drop_params = True
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # The import leaves ~400,000 long-lived objects (LiteLLM, the OpenAI SDK, their
        # pydantic models). A streamed answer allocates many objects per chunk and LiteLLM
        # keeps every chunk until the stream ends, so full collections come often, and
        # each walked all of them: ~0.45 s a time, a fifth of a long stream's time and a
        # stall for every other stream in the process. Freezing moves what exists now out
        # of the collector's reach (it is still freed by reference counting).
        gc.freeze()
        _litellm = litellm
        _imported.set()
        return litellm


def start_background_import() -> None:
    """Import LiteLLM in a daemon thread so the first request does not wait for it."""
    if _imported.is_set() or _import_lock.locked():
        return
    threading.Thread(target=_import_quietly, name="litellm-import", daemon=True).start()


def _import_quietly() -> None:
    try:
        _import_litellm()
    except Exception:
        logger.exception("LiteLLM could not be imported")


async def _alitellm() -> ModuleType:
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_import_litellm)


# --- health ----------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_state: dict[str, tuple[float, bool]] = {}
_answered_once: set[str] = set()
_PROBE_TTL_S = 2.0


def health() -> dict[str, Any]:
    """Readiness of the gateway: ``{"status": "up"|"starting"|"down", "reason": str|None}``.

    ``starting`` until LiteLLM is imported and, when a default tier uses the local model
    server, until that server answers ``/models``; ``down`` when the import failed or
    the local server stopped answering after it had answered once.
    """
    if _import_error:
        return {"status": "down", "reason": _import_error}
    if not _imported.is_set():
        return {"status": "starting", "reason": "loading LiteLLM"}
    for api_base in _local_api_bases():
        if not _local_server_answers(api_base):
            if api_base in _answered_once:
                return {"status": "down", "reason": f"local model server {api_base} not answering"}
            return {"status": "starting", "reason": f"waiting for the local model at {api_base}"}
    return {"status": "up", "reason": None}


def _local_api_bases() -> list[str]:
    bases = {
        str(entry.get("api_base"))
        for entries in settings.LLM_DEFAULT_TIERS.values()
        for entry in entries
        if entry.get("api_base") == settings.LLM_LOCAL_API_BASE
    }
    return sorted(bases)


def _local_server_answers(api_base: str) -> bool:
    now = time.monotonic()
    with _probe_lock:
        cached = _probe_state.get(api_base)
        if cached and now - cached[0] < _PROBE_TTL_S:
            return cached[1]
    try:
        answered = httpx.get(f"{api_base.rstrip('/')}/models", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        answered = False
    with _probe_lock:
        _probe_state[api_base] = (now, answered)
        if answered:
            _answered_once.add(api_base)
    return answered


# --- routes: tier → fallback list with keys ------------------------------------------


@dataclass(frozen=True, slots=True)
class _Route:
    tier: str
    model: str
    api_base: str | None
    api_key: str
    # A base model behind a completions endpoint gets a plain transcript, no tools.
    base_model: bool

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"


# LiteLLM's provider for a completions endpoint; behind it we assume a base model.
_BASE_MODEL_PREFIX = "text-completion-openai/"

# Passed when an entry names no secret, so LiteLLM never falls back to an ambient
# provider key from the environment (local servers ignore it).
_NO_KEY = "no-key"


def _routes(tier: str, instance: Any | None, secrets: Mapping[str, str] | None) -> list[_Route]:
    """The fallback list for ``tier`` with keys resolved.

    Raises:
        ValueError: ``tier`` is not one of :data:`TIERS`.
        LLMConfigurationError: no entry for the tier, or none has its secret.
    """
    entries = _tier_entries(tier, instance)
    # The settings' defaults name environment variables; an instance's map, its secrets.
    own_map = bool((getattr(instance, "tier_map", None) or {}).get(tier))
    routes: list[_Route] = []
    missing: list[str] = []
    for entry in entries:
        model = str(entry.get("model") or "")
        if not model:
            continue
        secret = entry.get("secret")
        api_key = _NO_KEY
        if secret:
            value = _secret_value(str(secret), (secrets or {}) if own_map else None)
            if not value:
                missing.append(str(secret))
                continue
            api_key = value
        routes.append(
            _Route(
                tier=tier,
                model=model,
                api_base=entry.get("api_base") or None,
                api_key=api_key,
                base_model=model.startswith(_BASE_MODEL_PREFIX),
            )
        )
    if routes:
        return routes
    if missing:
        names = ", ".join(missing)
        raise LLMConfigurationError(
            f"The {tier} tier cannot be used: the secret {names} is not set for this instance.",
            missing_secrets=tuple(missing),
        )
    raise LLMConfigurationError(f"No model is configured for the {tier} tier.")


def _secret_value(name: str, secrets: Mapping[str, str] | None) -> str | None:
    """The value of secret ``name``: from ``secrets`` (an instance's), or without them
    the environment variable of that name (for the settings' default tiers).
    """
    if secrets is None:
        return env_secret(name) or None
    return secrets.get(name) or None


def is_base_model(*, tier: str, instance: Any | None = None) -> bool:
    """True when ``tier``'s first entry is a base model behind a completions endpoint
    (the bundled local model): such a model gets no tools and no JSON schema, and the
    pipeline skips model-based pre- and post-processing for it (docs/architecture.md §6).
    """
    entries = _tier_entries(tier, instance)
    return bool(entries) and str(entries[0].get("model", "")).startswith(_BASE_MODEL_PREFIX)


async def context_tokens(*, tier: str, instance: Any | None = None) -> int:
    """The input context, in tokens, of ``tier``'s first entry.

    ``settings.LLM_LOCAL_CONTEXT_TOKENS`` for a base model behind a completions endpoint,
    else LiteLLM's price map (``max_input_tokens``), else
    ``settings.LLM_FALLBACK_CONTEXT_TOKENS`` for models it does not know.
    """
    entries = _tier_entries(tier, instance)
    model = str(entries[0].get("model", "")) if entries else ""
    if model.startswith(_BASE_MODEL_PREFIX):
        return int(settings.LLM_LOCAL_CONTEXT_TOKENS)
    lib = await _alitellm()
    try:
        info = lib.get_model_info(model)
    except Exception:
        info = {}
    known = info.get("max_input_tokens") or info.get("max_tokens")
    return int(known) if known else int(settings.LLM_FALLBACK_CONTEXT_TOKENS)


def _tier_entries(tier: str, instance: Any | None) -> list[dict[str, Any]]:
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; expected one of {', '.join(TIERS)}")
    tier_map = getattr(instance, "tier_map", None) or {}
    return list(tier_map.get(tier) or settings.LLM_DEFAULT_TIERS.get(tier) or [])


# --- calls -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CallContext:
    tier: str
    stage: str
    chat_id: str | None
    instance_id: int | None
    timeout_s: float


def _context(
    tier: str, stage: str, chat_id: str | None, instance: Any | None, timeout_s: float | None
) -> _CallContext:
    instance_id = getattr(instance, "pk", None) if instance is not None else None
    return _CallContext(
        tier=tier,
        stage=stage,
        chat_id=str(chat_id) if chat_id else None,
        instance_id=int(instance_id) if instance_id is not None else None,
        timeout_s=float(timeout_s or settings.LLM_TIMEOUT_S),
    )


def _request(
    route: _Route,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    response_schema: dict[str, Any] | None,
    timeout_s: float,
) -> dict[str, Any]:
    """LiteLLM keyword arguments for one attempt on ``route``."""
    request: dict[str, Any] = {
        "model": route.model,
        "api_key": route.api_key,
        "timeout": timeout_s,
        "num_retries": 0,  # retries and fallbacks are ours
    }
    if route.api_base:
        request["api_base"] = route.api_base
    if route.base_model:
        max_tokens = int(settings.LLM_LOCAL_MAX_TOKENS)
        budget = (int(settings.LLM_LOCAL_CONTEXT_TOKENS) - max_tokens) * _CHARS_PER_TOKEN
        prompt = base_model_prompt(messages, max_chars=budget)
        request.update(
            messages=[{"role": "user", "content": prompt}],
            stop=BASE_MODEL_STOP,
            max_tokens=max_tokens,
        )
        return request
    request["messages"] = messages
    if tools:
        request["tools"] = tools
    if response_schema is not None:
        request["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": response_schema, "strict": True},
        }
    return request


async def complete(
    *,
    tier: str,
    messages: list[dict[str, Any]],
    instance: Any | None = None,
    secrets: Mapping[str, str] | None = None,
    tools: list[dict[str, Any]] | None = None,
    response_schema: dict[str, Any] | None = None,
    stage: str = "main",
    chat_id: str | None = None,
    timeout_s: float | None = None,
) -> Completion:
    """One non-streaming completion on ``tier``, with retries and fallbacks.

    ``messages`` and ``tools`` are in OpenAI's chat format. With ``response_schema`` (a
    JSON schema) the answer must be a JSON object, returned parsed in ``Completion.data``.
    ``secrets`` are the values of the secrets ``instance``'s tier map names,
    ``{name: value}``; a secret absent from them counts as not set.

    Raises:
        ValueError: unknown tier.
        LLMConfigurationError: the tier cannot be served (names the missing secret).
        LLMError: every attempt failed; ``code`` says how the last one failed.
    """
    routes = _routes(tier, instance, secrets)
    lib = await _alitellm()
    context = _context(tier, stage, chat_id, instance, timeout_s)
    failure = LLMError("provider_error", "The model call failed.")
    for route in routes:
        request = _request(route, messages, tools, response_schema, context.timeout_s)
        for attempt in range(int(settings.LLM_RETRIES) + 1):
            started = time.perf_counter()
            try:
                async with asyncio.timeout(context.timeout_s):
                    response = await lib.acompletion(**request)
                result = _completion_from(response, route, response_schema)
            except Exception as exc:
                failure = _failure(exc, lib)
                _log_attempt(context, route, "completion", started, None, failure.code, exc)
                if failure.retryable and attempt < int(settings.LLM_RETRIES):
                    await asyncio.sleep(_backoff_s(attempt))
                    continue
                break
            _log_attempt(context, route, "completion", started, result.usage, None, None)
            return result
    raise failure


def _completion_from(
    response: Any, route: _Route, response_schema: dict[str, Any] | None
) -> Completion:
    choice = response.choices[0]
    message = choice.message
    text = strip_tool_markup(getattr(message, "content", None) or "")
    calls: list[ToolCall] = []
    for number, raw in enumerate(getattr(message, "tool_calls", None) or ()):
        arguments = parse_tool_arguments(raw.function.arguments or "")
        if arguments is None or not raw.function.name:
            raise LLMError("invalid_json", "The model produced a malformed tool call.")
        calls.append(ToolCall(raw.id or f"call_{number}", raw.function.name, arguments))
    usage = getattr(response, "usage", None)
    counts = Usage(
        int(getattr(usage, "prompt_tokens", 0) or 0),
        int(getattr(usage, "completion_tokens", 0) or 0),
    )
    data = None
    if response_schema is not None:
        data = parse_tool_arguments(text) if text.strip() else None
        if data is None:
            raise LLMError("invalid_json", "The model did not answer with a JSON object.")
    reason = "tool_calls" if calls else str(choice.finish_reason or "stop")
    return Completion(text, calls, counts, reason, route.model, data)


async def stream(
    *,
    tier: str,
    messages: list[dict[str, Any]],
    instance: Any | None = None,
    secrets: Mapping[str, str] | None = None,
    tools: list[dict[str, Any]] | None = None,
    response_schema: dict[str, Any] | None = None,
    stage: str = "main",
    chat_id: str | None = None,
    timeout_s: float | None = None,
) -> AsyncIterator[LLMEvent]:
    """Stream a completion on ``tier`` as :data:`LLMEvent` values.

    Yields ``TextDelta`` as text arrives, then on success the ``ToolCall`` values, a
    ``Usage`` (when the provider reports one) and a ``Finish``; on failure one
    ``StreamError`` last. ``timeout_s`` (default ``settings.LLM_TIMEOUT_S``) bounds the
    wait for each chunk. Falls back to the next entry only while nothing was yielded.
    ``secrets`` as for :func:`complete`.

    Raises:
        ValueError: unknown tier.
        LLMConfigurationError: the tier cannot be served (before anything is yielded).
    """
    routes = _routes(tier, instance, secrets)
    lib = await _alitellm()
    context = _context(tier, stage, chat_id, instance, timeout_s)
    failure = StreamError("provider_error", _MESSAGES["provider_error"], False)
    for route in routes:
        request = _request(route, messages, tools, response_schema, context.timeout_s)
        request.update(stream=True, stream_options={"include_usage": True})
        for attempt in range(int(settings.LLM_RETRIES) + 1):
            attempt_state = _StreamAttempt(context, route)
            async with contextlib.aclosing(attempt_state.run(lib, request)) as events:
                async for event in events:
                    yield event
            if attempt_state.outcome is None:
                return
            failure = attempt_state.outcome
            if attempt_state.visible:
                yield failure
                return
            if failure.retryable and attempt < int(settings.LLM_RETRIES):
                await asyncio.sleep(_backoff_s(attempt))
                continue
            break
    yield failure


class _StreamAttempt:
    """One streamed attempt on one route.

    :meth:`run` yields the events that may go out; when it ends, ``outcome`` is ``None``
    on success (the final events were yielded) or the error the caller decides on.
    """

    def __init__(self, context: _CallContext, route: _Route) -> None:
        self.context = context
        self.route = route
        self.visible = False
        self.outcome: StreamError | None = None

    async def run(self, lib: ModuleType, request: dict[str, Any]) -> AsyncGenerator[LLMEvent, None]:
        started = time.perf_counter()
        normaliser = StreamNormaliser()
        response: Any = None
        usage: Usage | None = None
        error: BaseException | None = None
        try:
            async with asyncio.timeout(self.context.timeout_s):
                response = await lib.acompletion(**request)
            _iterate_provider_stream_once(response)
            chunks = aiter(response)
            while True:
                async with asyncio.timeout(self.context.timeout_s):
                    chunk = await anext(chunks, None)
                if chunk is None:
                    break
                for event in normaliser.feed(chunk):
                    self.visible = True
                    yield event
        except Exception as exc:
            error = exc
            self.outcome = _stream_failure(exc, lib)
            await _close_quietly(response)
        except BaseException as exc:  # cancelled, or the consumer stopped iterating
            _log_attempt(self.context, self.route, "stream", started, None, "cancelled", exc)
            await _close_quietly(response)
            raise
        if self.outcome is None:
            final = normaliser.finish(self.route.model)
            if final and isinstance(final[-1], StreamError):
                self.outcome = final[-1]
                final = final[:-1]
            for event in final:
                if isinstance(event, Usage):
                    usage = event
                if isinstance(event, TextDelta):
                    self.visible = True
                if self.outcome is None or isinstance(event, TextDelta):
                    yield event
        if normaliser.markup.seen_markup:
            logger.warning("%s wrote tool-call markup into its text; removed", self.route.model)
        code = self.outcome.code if self.outcome else None
        _log_attempt(self.context, self.route, "stream", started, usage, code, error)


class _ProviderStream:
    """A provider's chunk stream whose ``__aiter__`` is itself (see below)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __aiter__(self) -> _ProviderStream:
        return self

    async def __anext__(self) -> Any:
        return await self._stream.__anext__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _iterate_provider_stream_once(response: Any) -> None:
    """Make LiteLLM read the provider's stream through one iterator.

    LiteLLM's stream wrapper starts a new ``async for`` over the provider stream for each
    chunk, and the OpenAI SDK's stream makes a new async generator for each ``async for``:
    one generator per chunk, abandoned after one item and closed through the event loop's
    finaliser hook (a self-pipe write and a task each). With 200 concurrent streams that
    was a sixth of the server's event-loop time (py-spy, bench/turn_overhead.py).
    """
    stream = getattr(response, "completion_stream", None)
    if stream is not None and hasattr(stream, "__anext__") and not inspect.isasyncgen(stream):
        response.completion_stream = _ProviderStream(stream)


async def _close_quietly(response: Any) -> None:
    close = getattr(response, "aclose", None)
    if close is None:
        return
    with contextlib.suppress(Exception):  # an abandoned stream; nothing to report
        await close()


def _backoff_s(attempt: int) -> float:
    return float(settings.LLM_RETRY_BACKOFF_S) * (2**attempt)


# --- errors ----------------------------------------------------------------------------

_MESSAGES = {
    "rate_limited": "The model provider is rate-limiting requests.",
    "provider_unavailable": "The model provider is unavailable.",
    "connection_error": "The model provider could not be reached.",
    "tool_not_in_request": "The model called a tool that was not offered.",
    "timeout": "The model did not answer in time.",
    "auth_failed": "The model provider refused the key.",
    "context_too_long": "The conversation is too long for the model.",
    "bad_request": "The model provider refused the request.",
    "invalid_json": "The model did not answer in the expected format.",
    "stream_cut": "The model's answer ended unexpectedly.",
    "provider_error": "The model call failed.",
}


def _failure(exc: BaseException, lib: ModuleType) -> LLMError:
    """Classify an exception from LiteLLM (or from parsing its answer)."""
    if isinstance(exc, LLMError):
        return exc
    code, retryable = _classify(exc, lib)
    return LLMError(code, _MESSAGES[code], retryable=retryable)


def _stream_failure(exc: BaseException, lib: ModuleType) -> StreamError:
    code, retryable = _classify(exc, lib)
    return StreamError(code, _MESSAGES[code], retryable)


def _classify(exc: BaseException, lib: ModuleType) -> tuple[str, bool]:
    errors = lib.exceptions
    # LiteLLM wraps an error raised inside a stream; the original says what happened.
    original = getattr(exc, "original_exception", None)
    if isinstance(original, Exception):
        exc = original
    status = getattr(exc, "status_code", None)
    if isinstance(exc, TimeoutError | errors.Timeout):
        return "timeout", False
    if isinstance(exc, errors.RateLimitError) or status == 429:
        return "rate_limited", True
    if isinstance(exc, errors.ContextWindowExceededError):
        return "context_too_long", False
    if isinstance(exc, errors.AuthenticationError) or status in (401, 403):
        return "auth_failed", False
    if isinstance(exc, errors.BadRequestError) or status == 400:
        # Some providers reject a tool call the model made up; another try usually works.
        if "not in request" in str(exc).lower():
            return "tool_not_in_request", True
        return "bad_request", False
    if isinstance(exc, errors.APIConnectionError | httpx.TransportError | ConnectionError):
        return "connection_error", True
    if isinstance(status, int) and status >= 500:
        return "provider_unavailable", True
    if isinstance(exc, errors.InternalServerError | errors.ServiceUnavailableError):
        return "provider_unavailable", True
    return "provider_error", False


# --- embeddings ------------------------------------------------------------------------


async def embed(
    texts: list[str], *, instance: Any | None = None, secrets: Mapping[str, str] | None = None
) -> list[list[float]]:
    """Embed ``texts`` with the instance's embedding model (else the settings' default).

    Returns one vector per text, each of the model's dimension (``embedding_dimensions``
    of the instance, else ``settings.LLM_EMBEDDING_DIMENSIONS``). ``local/…`` models run
    in-process without network; others go through LiteLLM, with the key (and
    ``api_base``) of the instance's tier entry for the same model, else for the same
    provider; ``secrets`` as for :func:`complete`.

    Raises:
        LLMConfigurationError: unknown local model, or a missing secret.
        LLMError: the provider failed, or the vectors have the wrong dimension.
    """
    if not texts:
        return []
    model = getattr(instance, "embedding_model", None) or settings.LLM_EMBEDDING_MODEL
    dimensions = int(
        getattr(instance, "embedding_dimensions", None) or settings.LLM_EMBEDDING_DIMENSIONS
    )
    context = _context("", "embed", None, instance, None)
    route = _embedding_route(str(model), instance, secrets)
    started = time.perf_counter()
    try:
        if route.provider == "local":
            vectors = await _local_embed(route.model, texts)
            usage = Usage(0, 0)
        else:
            vectors, usage = await _remote_embed(route, texts, context.timeout_s)
    except LLMError as exc:
        _log_attempt(context, route, "embedding", started, None, exc.code, exc)
        raise
    except Exception as exc:
        lib = _litellm
        failure = _failure(exc, lib) if lib is not None else LLMError("provider_error", str(exc))
        _log_attempt(context, route, "embedding", started, None, failure.code, exc)
        raise failure from exc
    _log_attempt(context, route, "embedding", started, usage, None, None)
    if any(len(vector) != dimensions for vector in vectors):
        raise LLMError(
            "bad_request", f"{model} returned vectors that are not {dimensions}-dimensional."
        )
    return vectors


def _embedding_route(model: str, instance: Any | None, secrets: Mapping[str, str] | None) -> _Route:
    tier_map = getattr(instance, "tier_map", None) or {}
    provider = model.split("/", 1)[0]
    candidates = [
        entry
        for tier in TIERS
        for entry in (tier_map.get(tier) or [])
        if str(entry.get("model", "")).split("/", 1)[0] == provider
    ]
    same_model = [e for e in candidates if e.get("model") == model]
    entry: dict[str, Any] = (same_model or candidates or [{}])[0]
    api_key = _NO_KEY
    secret = entry.get("secret")
    if secret and provider != "local":
        # The entry is the instance's own: its key is one of the instance's secrets.
        value = _secret_value(str(secret), secrets or {})
        if not value:
            raise LLMConfigurationError(
                f"The embedding model {model} cannot be used: the secret {secret} is not set.",
                missing_secrets=(str(secret),),
            )
        api_key = value
    api_base = entry.get("api_base") if entry.get("model") == model else None
    return _Route("", model, api_base or None, api_key, base_model=False)


async def _remote_embed(
    route: _Route, texts: list[str], timeout_s: float
) -> tuple[list[list[float]], Usage]:
    lib = await _alitellm()
    request: dict[str, Any] = {
        "model": route.model,
        "input": texts,
        "api_key": route.api_key,
        "timeout": timeout_s,
    }
    if route.api_base:
        request["api_base"] = route.api_base
    response = await lib.aembedding(**request)
    vectors = [[float(x) for x in item["embedding"]] for item in response.data]
    usage = getattr(response, "usage", None)
    return vectors, Usage(int(getattr(usage, "prompt_tokens", 0) or 0), 0)


async def _local_embed(model: str, texts: list[str]) -> list[list[float]]:
    try:
        # In a thread: the first call loads the model, every call runs it on the CPU.
        return await asyncio.to_thread(embeddings.local_embed, model, texts)
    except embeddings.LocalEmbeddingError as exc:
        raise LLMConfigurationError(str(exc)) from exc


# --- the AI call log -------------------------------------------------------------------


def _price_per_token(model: str) -> tuple[float, float] | None:
    """US dollars per prompt and per completion token from LiteLLM's bundled price map;
    None for models it does not know (or before LiteLLM is imported)."""
    lib = _litellm
    if lib is None:
        return None
    try:
        prompt_cost, _ = lib.cost_per_token(model=model, prompt_tokens=1000, completion_tokens=0)
        _, completion_cost = lib.cost_per_token(
            model=model, prompt_tokens=0, completion_tokens=1000
        )
    except Exception:
        return None
    return float(prompt_cost) / 1000, float(completion_cost) / 1000


_call_log = CallLogWriter(price_per_token=_price_per_token)


def _log_attempt(
    context: _CallContext,
    route: _Route,
    kind: str,
    started: float,
    usage: Usage | None,
    error_code: str | None,
    exc: BaseException | None,
) -> None:
    outcome = "ok" if error_code is None else "cancelled" if error_code == "cancelled" else "error"
    error_class = ""
    if error_code is not None and error_code != "cancelled":
        # LiteLLM wraps errors raised inside a stream; the original names the cause.
        cause = getattr(exc, "original_exception", None) or exc
        error_class = type(cause).__name__ if cause is not None else error_code
    _call_log.put(
        {
            "instance_id": context.instance_id,
            "chat_id": context.chat_id or "",
            "kind": kind,
            "stage": context.stage,
            "tier": route.tier,
            "provider": route.provider,
            "model": route.model,
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0,
            "latency_ms": (time.perf_counter() - started) * 1000.0,
            "outcome": outcome,
            "error_class": error_class[:100],
        }
    )


async def aflush_call_log(timeout_s: float = 5.0) -> bool:
    """Wait until every queued AICall row is written; False if ``timeout_s`` passed."""
    return await _call_log.aflush(timeout_s)


def flush_call_log(timeout_s: float = 5.0) -> bool:
    """Blocking twin of :func:`aflush_call_log` (for tests and shutdown)."""
    return _call_log.flush(timeout_s)
