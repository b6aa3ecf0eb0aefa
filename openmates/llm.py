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
import contextvars
import gc
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

import httpx
from django.conf import settings

from openmates import embeddings
from openmates.api_base import api_base_refusal
from openmates.env import env_secret
from openmates.llm_calllog import CallLogWriter, sanitised_error_message
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
    "FAILURE_REASONS",
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
    "default_endpoint",
    "embed",
    "endpoint_outcomes_forget",
    "failure_reason",
    "flush_call_log",
    "health",
    "is_base_model",
    "model_label",
    "start_background_import",
    "stream",
    "tier_model",
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
    "empty_response",  # a stream that ended without text or a tool call
)
# The user-facing failure reasons (docs/protocol.md §8): the ``reason`` of an ``error``
# frame and of an AI call row, each with the English text a client shows (what happened,
# what to do). Several ERROR_CODES share a reason: the user can act on the reason only.
FAILURE_REASONS: dict[str, str] = {
    "provider_unreachable": (
        "The AI provider could not be reached. Try again in a few minutes; if it keeps"
        " happening, tell the administrator of this server."
    ),
    "provider_auth": (
        "The AI provider refused this server's API key. Tell the administrator of this"
        " server: the key in the instance's secrets needs to be checked."
    ),
    "provider_rate_limit": (
        "The AI provider is limiting requests right now. Wait a minute, then retry."
    ),
    "context_too_long": (
        "This chat is too long for the model. Start a new chat, or send a shorter message."
    ),
    "empty_response": "The model returned an empty answer. Retry, or rephrase your message.",
    "tool_failed": (
        "A tool the answer needed failed. Retry; if it keeps failing, tell the administrator"
        " of this server."
    ),
    "timeout": "The model took too long to answer. Retry in a moment.",
    "provider_not_configured": (
        "No model is set up for this instance (a provider key is missing). Tell the"
        " administrator of this server."
    ),
    "provider_error": (
        "The AI provider could not answer. Retry; if it keeps happening, tell the"
        " administrator of this server."
    ),
}
_REASON_OF_CODE = {
    "rate_limited": "provider_rate_limit",
    "provider_unavailable": "provider_unreachable",
    "connection_error": "provider_unreachable",
    "timeout": "timeout",
    "auth_failed": "provider_auth",
    "context_too_long": "context_too_long",
    "empty_response": "empty_response",
    "configuration": "provider_not_configured",
}
# Characters per token assumed when fitting a prompt into a local model's context; low
# on purpose (code and non-Latin scripts take more tokens per character).
_CHARS_PER_TOKEN = 2

# A client's sampling options for the main call of the turn it asked for (``temperature``,
# ``max_tokens``, ``stop``): set by /v1 around a server-managed turn (docs/api.md §3),
# read by :func:`stream` for the main stage only; a base model keeps its own stop and limit.
_NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})
main_call_options: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "main_call_options", default=_NO_OPTIONS
)


def failure_reason(code: str) -> str:
    """The user-facing reason (a key of :data:`FAILURE_REASONS`) of an error ``code`` of
    :data:`ERROR_CODES`; ``provider_error`` for the codes a user cannot act on apart
    (a refused request, a malformed answer, a cut stream) and for unknown codes."""
    return _REASON_OF_CODE.get(code, "provider_error")


class LLMError(Exception):
    """A model call failed after retries and fallbacks.

    ``code`` is one of :data:`ERROR_CODES`, ``reason`` its :func:`failure_reason`;
    ``str()`` never quotes the provider's text.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable

    @property
    def reason(self) -> str:
        """The user-facing reason of :data:`FAILURE_REASONS`."""
        return failure_reason(self.code)


class EmbeddingDimensionError(LLMError):
    """The embedding model answered vectors of another dimension than the instance's
    (code ``bad_request``); ``expected`` and ``got`` are the dimensions."""

    def __init__(self, message: str, *, expected: int, got: int) -> None:
        super().__init__("bad_request", message)
        self.expected = expected
        self.got = got


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
        # LiteLLM prices every call by counting its prompt's tokens and loads tiktoken's
        # encoding for the first one: ~0.3 s on the event loop, which stalled every socket
        # of the process at the first model call. Loaded here, in the import's thread.
        with contextlib.suppress(Exception):
            litellm.token_counter(text="warm-up")
        # The import leaves ~400,000 long-lived objects (LiteLLM, the OpenAI SDK, their
        # pydantic models). A streamed answer allocates many objects per chunk and LiteLLM
        # keeps every chunk until the stream ends, so full collections come often, and
        # each walked all of them: ~0.45 s a time, a fifth of a long stream's time and a
        # stall for every other stream in the process. Freezing moves what exists now out
        # of the collector's reach (it is still freed by reference counting).
        gc.freeze()
        global _client_class, _sdk_stream_class
        _client_class = _parsing_client_class()
        import openai

        _sdk_stream_class = openai.AsyncStream
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


# --- OpenAI SDK clients ----------------------------------------------------------------

# Providers LiteLLM serves through the OpenAI SDK (``client=`` takes an ``AsyncOpenAI``).
_SDK_PROVIDERS = frozenset({"openai", "text-completion-openai"})
_client_class: type | None = None
# The SDK's streamed response class (``openai.AsyncStream``), read directly by _chunks_of.
_sdk_stream_class: type[Any] | None = None
# One client per event loop and endpoint: an httpx connection pool belongs to the loop
# it was opened on, and a loop's clients go when the loop does.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


def _parsing_client_class() -> type:
    """An ``AsyncOpenAI`` that reads each answer (every streamed SSE event) with
    pydantic's validator, falling back to the SDK's own reading for data that does not
    validate.

    The SDK builds its models with ``construct_type``, a recursive pure-Python walk:
    about 200 µs per streamed chunk on the bench machine, against about 10 µs for
    ``model_validate`` (pydantic-core), a fifth of the server's CPU per relayed token.
    The result is the same model class; data a lenient provider sends that the schema
    does not admit (a non-standard ``finish_reason``, a missing ``created``) still goes
    the SDK's way. ``_process_response_data`` is the SDK's (private) hook for this;
    tests/openmates/test_llm_stream.py fails if a new SDK stops calling it.
    """
    import openai
    import pydantic

    class ParsingAsyncOpenAI(openai.AsyncOpenAI):
        def _process_response_data(self, *, data: Any, cast_to: Any, response: Any) -> Any:
            if (
                isinstance(data, dict)
                and isinstance(cast_to, type)
                and issubclass(cast_to, pydantic.BaseModel)
                and not hasattr(cast_to, "build")
            ):
                try:
                    return cast_to.model_validate(data)
                except pydantic.ValidationError:
                    pass
            return super()._process_response_data(data=data, cast_to=cast_to, response=response)

    return ParsingAsyncOpenAI


def _sdk_client(route: _Route) -> Any | None:
    """The event loop's shared client for ``route`` (None for providers LiteLLM does not
    serve through the OpenAI SDK, or a route on the provider's default endpoint, whose
    address LiteLLM resolves itself). Reusing it skips LiteLLM's per-call client lookup;
    its parsing is :func:`_parsing_client_class`'s. No SDK retries: they are ours."""
    if _client_class is None or route.provider not in _SDK_PROVIDERS or not route.api_base:
        return None
    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (route.api_base, route.api_key)
    client = clients.get(key)
    if client is None:
        client = _client_class(api_key=route.api_key, base_url=route.api_base, max_retries=0)
        clients[key] = client
    return client


# --- health ----------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_state: dict[str, tuple[float, bool]] = {}
_answered_once: set[str] = set()
_PROBE_TTL_S = 2.0


# The last outcome of a call to each (model, api_base) in this process: (monotonic
# time, failure reason or "" for a success). The default endpoint counts as down while its
# last call failed with one of _OUTAGE_REASONS less than _OUTAGE_WINDOW_S ago.
_endpoint_outcomes: dict[tuple[str, str], tuple[float, str]] = {}
_OUTAGE_REASONS = frozenset({"provider_unreachable", "provider_auth", "provider_not_configured"})
_OUTAGE_WINDOW_S = 60.0


def default_endpoint() -> dict[str, str]:
    """The endpoint readiness checks: the first entry of the settings' ``standard`` tier,
    ``{"model": str, "api_base": str}`` (``api_base`` ``""`` for the provider's own)."""
    entries = settings.LLM_DEFAULT_TIERS.get("standard") or [{}]
    entry = entries[0] if entries else {}
    return {"model": str(entry.get("model") or ""), "api_base": str(entry.get("api_base") or "")}


def health() -> dict[str, Any]:
    """Readiness of the gateway: ``{"status": "up"|"starting"|"down", "reason": str|None,
    "endpoint": str}``, ``endpoint`` naming the default model endpoint checked
    (:func:`default_endpoint`, as ``"<model> at <api_base>"``).

    ``starting`` until LiteLLM is imported and, when a default tier uses the local model
    server, until that server answers ``/models``; ``down`` when the import failed, the
    local server stopped answering after it had answered once, the default endpoint's
    ``api_base`` does not answer HTTP at all, or the last call to the default endpoint in
    this process (within 60 s) failed as unreachable, refused key or not configured.
    """
    endpoint = default_endpoint()
    label = endpoint["model"] + (f" at {endpoint['api_base']}" if endpoint["api_base"] else "")
    return {**_health_state(endpoint), "endpoint": label}


def endpoint_outcomes_forget() -> None:
    """Forget the recorded call outcomes (tests; a reconfigured default endpoint)."""
    with _probe_lock:
        _endpoint_outcomes.clear()


def _endpoint_outcome(route: _Route, reason: str) -> None:
    with _probe_lock:
        _endpoint_outcomes[(route.model, route.api_base or "")] = (time.monotonic(), reason)


def _health_state(endpoint: dict[str, str]) -> dict[str, Any]:
    if _import_error:
        return {"status": "down", "reason": _import_error}
    if not _imported.is_set():
        return {"status": "starting", "reason": "loading LiteLLM"}
    for api_base in _local_api_bases():
        if not _local_server_answers(api_base):
            if api_base in _answered_once:
                return {"status": "down", "reason": f"local model server {api_base} not answering"}
            return {"status": "starting", "reason": f"waiting for the local model at {api_base}"}
    model, api_base = endpoint["model"], endpoint["api_base"]
    remote = api_base and api_base != settings.LLM_LOCAL_API_BASE
    if remote and not _local_server_answers(api_base, any_status=True):
        return {"status": "down", "reason": f"model endpoint {api_base} not answering"}
    with _probe_lock:
        last = _endpoint_outcomes.get((model, api_base))
    if last and last[1] in _OUTAGE_REASONS and time.monotonic() - last[0] < _OUTAGE_WINDOW_S:
        return {"status": "down", "reason": f"the last call to {model} failed: {last[1]}"}
    return {"status": "up", "reason": None}


def _local_api_bases() -> list[str]:
    bases = {
        str(entry.get("api_base"))
        for entries in settings.LLM_DEFAULT_TIERS.values()
        for entry in entries
        if entry.get("api_base") == settings.LLM_LOCAL_API_BASE
    }
    return sorted(bases)


def _local_server_answers(api_base: str, *, any_status: bool = False) -> bool:
    """Whether ``GET <api_base>/models`` answers 200 (any HTTP status below 500 with
    ``any_status``: a hosted endpoint asks for a key the probe does not send); cached
    for ``_PROBE_TTL_S``."""
    now = time.monotonic()
    with _probe_lock:
        cached = _probe_state.get(api_base)
        if cached and now - cached[0] < _PROBE_TTL_S:
            return cached[1]
    try:
        status = httpx.get(f"{api_base.rstrip('/')}/models", timeout=0.5).status_code
    except httpx.HTTPError:
        status = 0
    answered = status == 200 or (any_status and 0 < status < 500)
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
        LLMConfigurationError: no entry for the tier, or none has its secret and an
            allowed ``api_base``.
    """
    entries = _tier_entries(tier, instance)
    # The settings' defaults name environment variables; an instance's map, its secrets.
    own_map = bool((getattr(instance, "tier_map", None) or {}).get(tier))
    routes: list[_Route] = []
    missing: list[str] = []
    refused: list[str] = []
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
        api_base = entry.get("api_base") or None
        refusal = _api_base_refused(api_base) if own_map else None
        if refusal:
            refused.append(refusal)
            continue
        routes.append(
            _Route(
                tier=tier,
                model=model,
                api_base=api_base,
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
    if refused:
        raise LLMConfigurationError(f"The {tier} tier cannot be used: {refused[0]}")
    raise LLMConfigurationError(f"No model is configured for the {tier} tier.")


def _api_base_refused(api_base: str | None) -> str | None:
    """Why an instance's ``api_base`` is refused (``openmates.api_base``), or ``None``.

    Judged as written, at each call: a tier map saved before the rule, or a setting turned
    off since, is refused too; its host name was resolved when the map was saved.
    """
    reason = api_base_refusal(api_base, resolve=False) if api_base else None
    return f"the model endpoint {api_base} is refused: {reason}." if reason else None


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


# Readable names of models the product ships with; anything else is named by its own id.
_MODEL_LABELS = {"text-completion-openai/gemma-3-270m": "Gemma 3 270M (bundled)"}


def model_label(model: str) -> str:
    """A model id as people read it: ``"Gemma 3 270M (bundled)"`` for the bundled model,
    else the id without its LiteLLM provider prefix (``"openai/gpt-4o-mini"`` →
    ``"gpt-4o-mini"``); ``""`` for ``""``."""
    if model in _MODEL_LABELS:
        return _MODEL_LABELS[model]
    return model.split("/", 1)[1] if "/" in model else model


def tier_model(*, tier: str, instance: Any | None = None) -> str:
    """The model id of ``tier``'s first entry (the instance's map, else the settings'),
    ``""`` when the tier has none.

    Raises:
        ValueError: ``tier`` is not one of :data:`TIERS`.
    """
    entries = _tier_entries(tier, instance)
    return str(entries[0].get("model", "")) if entries else ""


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


async def supports_vision(*, tier: str, instance: Any | None = None) -> bool:
    """Whether ``tier``'s first entry takes images (``image_url`` parts): LiteLLM's
    ``supports_vision`` from its model map (or what ``litellm.register_model`` added);
    False for a base model behind a completions endpoint and for models LiteLLM does
    not know (docs/protocol.md §13)."""
    return _sees_images(await _alitellm(), tier_model(tier=tier, instance=instance))


def _sees_images(lib: ModuleType, model: str) -> bool:
    if not model or model.startswith(_BASE_MODEL_PREFIX):
        return False
    try:
        return bool(lib.supports_vision(model=model))
    except Exception:
        return False


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
    # What the call sent (message contents, embedded texts): a provider's error message
    # that quotes it has the quote removed before it is logged.
    sent: tuple[str, ...] = ()


def _context(
    tier: str,
    stage: str,
    chat_id: str | None,
    instance: Any | None,
    timeout_s: float | None,
    sent: tuple[str, ...] = (),
) -> _CallContext:
    instance_id = getattr(instance, "pk", None) if instance is not None else None
    return _CallContext(
        tier=tier,
        stage=stage,
        chat_id=str(chat_id) if chat_id else None,
        instance_id=int(instance_id) if instance_id is not None else None,
        timeout_s=float(timeout_s or settings.LLM_TIMEOUT_S),
        sent=sent,
    )


def _sent_texts(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """The text contents of chat-format ``messages`` (strings and ``text`` parts)."""
    texts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return tuple(texts)


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
    client = _sdk_client(route)
    if client is not None:
        request["client"] = client
    if route.base_model:
        max_tokens = int(settings.LLM_LOCAL_MAX_TOKENS)
        budget = (int(settings.LLM_LOCAL_CONTEXT_TOKENS) - max_tokens) * _CHARS_PER_TOKEN
        prompt = base_model_prompt(messages, max_chars=budget)
        request.update(
            messages=[{"role": "user", "content": prompt}],
            stop=BASE_MODEL_STOP,
            max_tokens=max_tokens,
            # Greedy: sampled, the bundled 270M model wandered off the question.
            temperature=0,
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
    context = _context(tier, stage, chat_id, instance, timeout_s, _sent_texts(messages))
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
    without_vision: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> AsyncIterator[LLMEvent]:
    """Stream a completion on ``tier`` as :data:`LLMEvent` values.

    Yields ``TextDelta`` as text arrives, then on success the ``ToolCall`` values, a
    ``Usage`` (when the provider reports one) and a ``Finish``; on failure one
    ``StreamError`` last. ``timeout_s`` (default ``settings.LLM_TIMEOUT_S``) bounds the
    wait for each chunk. Falls back to the next entry only while nothing was yielded.
    ``secrets`` as for :func:`complete`. ``without_vision(messages)``, when given, is
    what an entry whose model does not see images (:func:`supports_vision` of that
    entry) gets instead of ``messages`` with their image parts (docs/protocol.md §13).

    Raises:
        ValueError: unknown tier.
        LLMConfigurationError: the tier cannot be served (before anything is yielded).
    """
    routes = _routes(tier, instance, secrets)
    lib = await _alitellm()
    context = _context(tier, stage, chat_id, instance, timeout_s, _sent_texts(messages))
    failure = StreamError("provider_error", _MESSAGES["provider_error"], False)
    for route in routes:
        sent = messages
        if without_vision is not None and not _sees_images(lib, route.model):
            sent = without_vision(messages)
        request = _request(route, sent, tools, response_schema, context.timeout_s)
        request.update(stream=True, stream_options={"include_usage": True})
        if stage == "main" and not route.base_model:
            request.update(main_call_options.get())
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
        # A text delta with text or a tool call went out (else the answer is empty).
        self.answered = False
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
            chunks = _chunks_of(response, self.route)
            while True:
                async with asyncio.timeout(self.context.timeout_s):
                    chunk = await anext(chunks, None)
                if chunk is None:
                    break
                for fed in normaliser.feed(chunk):
                    event = _text_start(fed) if self.route.base_model and not self.answered else fed
                    if event is None:
                        continue
                    self.visible = True
                    self.answered = self.answered or _answers(event)
                    yield event
        except Exception as exc:
            error = exc
            self.outcome = _stream_failure(exc, lib)
            await _close_quietly(response)
        except BaseException as exc:  # cancelled, or the consumer stopped iterating
            _log_attempt(self.context, self.route, "stream", started, None, "cancelled", exc)
            await _close_quietly(response)
            raise
        else:
            await _close_quietly(response)  # the SDK's stream read directly ends here
        if self.outcome is None:
            final = normaliser.finish(self.route.model)
            if final and isinstance(final[-1], StreamError):
                self.outcome = final[-1]
                final = final[:-1]
            elif not (self.answered or any(_answers(event) for event in final)):
                # Nothing to show and nothing to run: a failure (worth the next entry).
                self.outcome = StreamError("empty_response", _MESSAGES["empty_response"], False)
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


def _text_start(event: LLMEvent) -> LLMEvent | None:
    """A base model's event before its answer's first character: the ``A:`` prompt makes
    it start with a space (or a line break), which is no part of the answer; a delta of
    only that is dropped (``None``)."""
    if not isinstance(event, TextDelta):
        return event
    text = event.text.lstrip()
    return TextDelta(text) if text else None


def _answers(event: LLMEvent) -> bool:
    return isinstance(event, ToolCall) or (isinstance(event, TextDelta) and bool(event.text))


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


def _chunks_of(response: Any, route: _Route) -> AsyncIterator[Any]:
    """The chunks of LiteLLM's streamed ``response``, read once through one iterator.

    For a route LiteLLM serves through the OpenAI SDK (:data:`_SDK_PROVIDERS`), whose
    ``completion_stream`` is the SDK's own ``AsyncStream`` of OpenAI-shaped chunks, those
    chunks are read directly: LiteLLM's ``CustomStreamWrapper`` rebuilds each chunk into
    its own model (and a per-chunk logging pass), and at the end of the stream rebuilds
    the whole answer from every chunk it kept (``stream_chunk_builder``), prices it and
    runs its success handlers, none of which the product uses: :class:`StreamNormaliser`
    reads the same fields from the SDK's chunks, usage comes from the provider's usage
    chunk (``stream_options.include_usage``) and the cost from the call log. About 350
    of the 390 µs of server CPU per relayed token, and several ms per call
    (bench/turn_overhead.py). Other providers' streams need LiteLLM's translation and go
    through its wrapper.
    """
    raw: Any = getattr(response, "completion_stream", None)
    sdk_stream = _sdk_stream_class
    if route.provider in _SDK_PROVIDERS and sdk_stream is not None and isinstance(raw, sdk_stream):
        return aiter(raw)
    _iterate_provider_stream_once(response)
    return aiter(response)


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
    "empty_response": "The model returned an empty answer.",
}


def _failure(exc: BaseException, lib: ModuleType) -> LLMError:
    """Classify an exception from LiteLLM (or from parsing its answer)."""
    if isinstance(exc, LLMError):
        return exc
    code, retryable = _classify(exc, lib)
    return LLMError(code, _MESSAGES[code], retryable=retryable)


def _openai_module() -> ModuleType:
    import openai  # imported with LiteLLM already: a dictionary lookup

    return openai


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
    # Raised by the SDK's own stream (read directly for SDK routes, _chunks_of).
    sdk = _openai_module()
    if isinstance(exc, sdk.APITimeoutError):
        return "timeout", False
    if isinstance(exc, sdk.APIConnectionError):
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
        EmbeddingDimensionError: the vectors have another dimension than the instance's.
        LLMError: the provider failed.
    """
    if not texts:
        return []
    model = getattr(instance, "embedding_model", None) or settings.LLM_EMBEDDING_MODEL
    dimensions = int(
        getattr(instance, "embedding_dimensions", None) or settings.LLM_EMBEDDING_DIMENSIONS
    )
    context = _context("", "embed", None, instance, None, tuple(texts))
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
    wrong = next((len(vector) for vector in vectors if len(vector) != dimensions), None)
    if wrong is not None:
        raise EmbeddingDimensionError(
            f"{model} returned vectors that are not {dimensions}-dimensional.",
            expected=dimensions,
            got=wrong,
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
    refusal = _api_base_refused(api_base)
    if refusal:
        raise LLMConfigurationError(f"The embedding model {model} cannot be used: {refusal}")
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
    error_class = reason = message = ""
    if outcome == "error":
        assert error_code is not None
        # LiteLLM wraps errors raised inside a stream; the original names the cause.
        cause = getattr(exc, "original_exception", None) or exc
        error_class = type(cause).__name__ if cause is not None else error_code
        reason = failure_reason(error_code)
        raw = str(cause) if cause is not None else _MESSAGES.get(error_code, error_code)
        keys = () if route.api_key == _NO_KEY else (route.api_key,)
        message = sanitised_error_message(raw or error_class, secrets=keys, sent=context.sent)
    if outcome != "cancelled":
        _endpoint_outcome(route, reason)
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
            "error_reason": reason,
            "error_message": message,
        }
    )


async def aflush_call_log(timeout_s: float = 5.0) -> bool:
    """Wait until every queued AICall row is written; False if ``timeout_s`` passed."""
    return await _call_log.aflush(timeout_s)


def flush_call_log(timeout_s: float = 5.0) -> bool:
    """Blocking twin of :func:`aflush_call_log` (for tests and shutdown)."""
    return _call_log.flush(timeout_s)
