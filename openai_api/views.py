"""``/v1/models`` and ``/v1/chat/completions``: OpenAI's API over server-managed turns.

Authentication is ``Authorization: Bearer`` with an instance key (``omk_…``: its
instance only, as the key's pseudo-user, role ``member``) or a user's API token
(``om_…``: the instances the user belongs to, as that user with their role). A model is
an instance slug. Each request runs the instance's pipeline through
``pipeline.server_turn`` (docs/api.md §3). The ``OpenMates-Conversation-Id`` request
header continues that server-side conversation (only its last user message is new);
without it the request's earlier messages seed a new conversation, whose id the
response header of the same name carries. Every error is OpenAI-shaped
(``openai_api.wire.WireError``), never Django's HTML page: a service outage (Redis, Vault,
the database) is 503 with ``Retry-After``, any other failure 500 ``internal_error``, both
logged with their traceback and told to the client without detail (:func:`failure_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import redis
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.instance_keys import instance_key_get_usable, is_instance_key
from accounts.services import api_token_authenticate
from instances.models import Instance, InstanceMember
from openai_api import quotas, wire
from openai_api.images import images_read, vision_tier
from openmates import ids
from openmates.db import db_call
from openmates.vault import VaultError
from pipeline import events as ev
from pipeline.protocol import ErrorCode, content_blank
from pipeline.server_turn import (
    ConversationNotFoundError,
    ServerTurn,
    ServerTurnInput,
    server_turn_start,
)

logger = logging.getLogger(__name__)

CONVERSATION_HEADER = "OpenMates-Conversation-Id"


@dataclass(frozen=True)
class Caller:
    """Who a ``/v1`` request runs as: ``user_id`` (whose data), ``subject`` (the limits'
    counter: ``key:<prefix>`` or ``user:<id>``), ``models`` slug → (instance, role)."""

    user_id: int
    subject: str
    models: dict[str, tuple[Instance, str]]


def _bad_key() -> wire.WireError:
    return wire.WireError(
        401,
        "The API key is missing, malformed, unknown, revoked or expired.",
        code="invalid_api_key",
        headers={"WWW-Authenticate": 'Bearer realm="v1"'},
    )


def _caller_load(raw: str) -> Caller | None:
    """The caller a Bearer credential names, or None (sync: database reads)."""
    if is_instance_key(raw):
        key = instance_key_get_usable(raw)
        if key is None:
            return None
        return Caller(
            user_id=key.user_id,
            subject=f"key:{key.prefix}",
            models={key.instance.slug: (key.instance, InstanceMember.Role.MEMBER)},
        )
    token = api_token_authenticate(raw)
    if token is None:
        return None
    members = InstanceMember.objects.filter(user_id=token.user_id).select_related("instance")
    return Caller(
        user_id=token.user_id,
        subject=f"user:{token.user_id}",
        models={m.instance.slug: (m.instance, m.role) for m in members},
    )


async def _authenticate(request: HttpRequest) -> Caller:
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise _bad_key()
    caller = await db_call(_caller_load, raw.strip())
    if caller is None:
        raise _bad_key()
    return caller


def _error(exc: wire.WireError) -> JsonResponse:
    return JsonResponse(exc.body(), status=exc.status, headers=exc.headers)


# Seconds a client is told to wait after a service outage (503): long enough for a
# restarted Redis or an unsealed Vault, short enough for a script's retry loop.
OUTAGE_RETRY_AFTER_S = 5


def failure_error(exc: Exception, *, doing: str) -> wire.WireError:
    """The OpenAI-shaped error for an unexpected failure while ``doing`` something
    (named in the log), logged with its traceback; the client gets no detail of it.

    Redis (``cache_unavailable``), a Vault outage (``vault_unavailable``) and a lost
    database connection (``database_unavailable``) are 503 ``server_error`` with
    ``Retry-After`` :data:`OUTAGE_RETRY_AFTER_S`; anything else (a Vault set-up fault
    too, which a retry cannot fix) is 500 ``server_error`` ``internal_error``.
    """
    outages: list[tuple[type[Exception] | tuple[type[Exception], ...], str, str]] = [
        (redis.RedisError, "cache_unavailable", "The cache"),
        ((OperationalError, InterfaceError), "database_unavailable", "The database"),
    ]
    if isinstance(exc, VaultError) and exc.is_outage:
        outages.append((VaultError, "vault_unavailable", "The key service"))
    for kinds, code, what in outages:
        if isinstance(exc, kinds):
            logger.warning("v1 %s: %s unavailable", doing, what.lower(), exc_info=exc)
            return wire.WireError(
                503,
                f"{what} is unavailable; try again shortly.",
                type_="server_error",
                code=code,
                headers={"Retry-After": str(OUTAGE_RETRY_AFTER_S)},
            )
    logger.error("v1 %s failed", doing, exc_info=exc)
    return wire.WireError(
        500, "Something went wrong on the server.", type_="server_error", code="internal_error"
    )


_View = Callable[[HttpRequest], Coroutine[Any, Any, HttpResponse | StreamingHttpResponse]]


def _openai_errors(view: _View) -> _View:
    """``view`` with every exception it raises answered OpenAI-shaped: a
    :class:`wire.WireError` as it is, anything else through :func:`failure_error`."""

    @functools.wraps(view)
    async def wrapped(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
        try:
            return await view(request)
        except wire.WireError as exc:
            return _error(exc)
        except Exception as exc:
            return _error(failure_error(exc, doing=f"{request.method} {request.path}"))

    return wrapped


@csrf_exempt
async def not_found(request: HttpRequest) -> HttpResponse:
    """Any other path under ``/v1/``: 404 ``{"error": {"type": "invalid_request_error",
    "code": "unknown_url"}}``, as OpenAI answers a path it does not have."""
    return _error(
        wire.WireError(404, f"Unknown path {request.path!r} under /v1/.", code="unknown_url")
    )


@csrf_exempt
@_openai_errors
async def models(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: ``{"object": "list", "data": [{"id": slug, "object": "model",
    "created": unix seconds, "owned_by": "openmates"}]}`` of the caller's instances."""
    if request.method != "GET":
        raise wire.WireError(405, "Use GET.", code="method_not_allowed")
    caller = await _authenticate(request)
    data = [
        {
            "id": slug,
            "object": "model",
            "created": int(instance.created_at.timestamp()),
            "owned_by": "openmates",
        }
        for slug, (instance, _) in sorted(caller.models.items())
    ]
    return JsonResponse({"object": "list", "data": data})


def _model(caller: Caller, name: str) -> tuple[Instance, str]:
    found = caller.models.get(name)
    if found is None:
        raise wire.WireError(
            404,
            f"The model {name!r} does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    return found


async def _limit_check(instance: Instance, caller: Caller) -> None:
    over = await quotas.acheck(instance=instance, subject=caller.subject)
    if over is not None:
        raise wire.WireError(
            429,
            f"Over the {over.limit.replace('_', ' ')} limit; retry in {over.retry_after_s} s.",
            type_="rate_limit_error",
            code=over.limit,
            headers={"Retry-After": str(over.retry_after_s)},
        )


def _turn_input(
    request: HttpRequest, body: wire.ChatRequest, caller: Caller, found: tuple[Instance, str]
) -> ServerTurnInput:
    conversation = request.headers.get(CONVERSATION_HEADER) or None
    if conversation is not None and not ids.is_uuid7(conversation):
        raise _no_conversation()
    last = body.messages[-1]
    text, images = wire.message_content(last.content, where=_last_param(body))
    history = []
    if conversation is None:
        for number, message in enumerate(body.messages[:-1]):
            content = wire.part_text(message.content, where=f"messages.{number}.content")
            history.append({"role": message.role, "content": content})
    if "\x00" in text:
        raise wire.WireError(
            400,
            "The last user message must not contain NUL characters.",
            code="invalid_value",
            param="messages",
        )
    if content_blank(text):
        no_text = "The last user message has no text; an image needs some text with it."
        raise wire.WireError(
            400,
            no_text if images else "The last user message is empty.",
            code="invalid_value",
            param="messages",
        )
    return ServerTurnInput(
        instance=found[0],
        user_id=caller.user_id,
        role=found[1],
        text=text,
        conversation_id=conversation,
        history=history,
        options=wire.main_call_options(body),
        end_user=wire.end_user(body),
        files=images_read(images, param=_last_param(body)) if images else (),
    )


def _last_param(body: wire.ChatRequest) -> str:
    return f"messages.{len(body.messages) - 1}.content"


def _no_conversation() -> wire.WireError:
    return wire.WireError(
        404,
        f"No conversation with this {CONVERSATION_HEADER} for this key and model.",
        code="conversation_not_found",
    )


async def _start(request: HttpRequest) -> tuple[wire.ChatRequest, Caller, ServerTurn]:
    if request.method != "POST":
        raise wire.WireError(405, "Use POST.", code="method_not_allowed")
    caller = await _authenticate(request)
    try:
        raw = request.body
    except RequestDataTooBig:
        raise wire.WireError(
            413, "The request body is too large.", code="request_too_large"
        ) from None
    body = wire.parse_request(raw)
    found = _model(caller, body.model)
    inp = _turn_input(request, body, caller, found)
    if inp.files:
        tier = await vision_tier(instance=inp.instance, role=inp.role, param=_last_param(body))
        inp = dataclasses.replace(inp, tier=tier)
    await _limit_check(found[0], caller)
    if inp.end_user:
        # Recorded for the operator; never used to choose whose data the turn reads.
        logger.info(
            "v1 request by %s for %s, end user %r", caller.subject, body.model, inp.end_user
        )
    try:
        turn = await server_turn_start(inp)
    except ConversationNotFoundError:
        raise _no_conversation() from None
    return body, caller, turn


@csrf_exempt
@_openai_errors
async def chat_completions(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """``POST /v1/chat/completions``: a ``chat.completion`` or its SSE chunks."""
    body, caller, turn = await _start(request)
    created = int(time.time())
    headers = {CONVERSATION_HEADER: turn.conversation_id}
    if body.stream:
        response = StreamingHttpResponse(
            _sse(turn, body, caller, created), content_type="text/event-stream", headers=headers
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass chunks on as they come
        return response
    done = await turn.run_to_end(until_done=True)
    await _tokens_count(turn, caller, done)
    if done.status != "done":
        return _error(_turn_failed(turn))
    result = wire.completion_json(
        completion_id=f"chatcmpl-{turn.reply_id}",
        created=created,
        model=body.model,
        text=done.content,
        finish=done.finish_reason or "stop",
        usage=done.usage,
    )
    return JsonResponse(result, headers=headers)


def _turn_failed(turn: ServerTurn, error: ev.Error | None = None) -> wire.WireError:
    status = turn.final.status if turn.final is not None else "failed"
    message = error.message if error is not None else f"The turn ended {status}."
    return wire.WireError(502, message, type_="server_error", code=error.code if error else status)


async def _tokens_count(turn: ServerTurn, caller: Caller, done: ev.StreamDone) -> None:
    """Count the finished turn's tokens. The answer exists and is stored by now, so a
    failure to count (Redis down) is logged and the answer still sent: the next request's
    limit check meets the same outage and is refused 503."""
    used = sum(int(v) for v in done.usage.values())
    try:
        await quotas.atokens_add(instance_id=turn.instance.pk, subject=caller.subject, tokens=used)
    except Exception:
        logger.exception("v1: the tokens of turn %s could not be counted", turn.reply_id)


# Characters per token for an estimate (OpenAI's rule of thumb for English text).
CHARS_PER_TOKEN = 4
_counting: set[asyncio.Task[None]] = set()


def estimated_tokens(body: wire.ChatRequest, streamed_chars: int) -> int:
    """Tokens a stream the client left used, estimated from characters: the request's
    messages and what was streamed, :data:`CHARS_PER_TOKEN` per token, at least 1. The
    provider's usage comes only at a stream's end, which a client that disconnects
    never lets come."""
    chars = sum(len(str(message.content)) for message in body.messages) + streamed_chars
    return max(1, -(-chars // CHARS_PER_TOKEN))


def _count_left_stream(turn: ServerTurn, caller: Caller, tokens: int) -> None:
    # The response's task is being cancelled: count in a task of its own.
    counting = asyncio.ensure_future(
        quotas.atokens_add(instance_id=turn.instance.pk, subject=caller.subject, tokens=tokens)
    )
    _counting.add(counting)
    counting.add_done_callback(_counted)


def _counted(counting: asyncio.Task[None]) -> None:
    _counting.discard(counting)
    failure = None if counting.cancelled() else counting.exception()
    if failure is not None:
        logger.error("v1: a left stream's tokens could not be counted", exc_info=failure)


async def _sse(
    turn: ServerTurn, body: wire.ChatRequest, caller: Caller, created: int
) -> AsyncIterator[bytes]:
    """The turn as ``chat.completion.chunk`` events, ``data: [DONE]`` last. A failure
    after the response started (its status is sent) ends the turn and the stream with
    an ``{"error": …}`` event (:func:`failure_error`), then ``data: [DONE]``, as
    OpenAI's streams report an error."""
    async with contextlib.aclosing(_sse_events(turn, body, caller, created)) as events:
        try:
            async for data in events:
                yield data
        except Exception as exc:
            turn.cancel()
            yield wire.sse(failure_error(exc, doing=f"stream of turn {turn.reply_id}").body())
            yield wire.sse("[DONE]")


async def _sse_events(
    turn: ServerTurn, body: wire.ChatRequest, caller: Caller, created: int
) -> AsyncGenerator[bytes, None]:
    with_usage = bool(body.stream_options and body.stream_options.include_usage)
    base: dict[str, Any] = {
        "completion_id": f"chatcmpl-{turn.reply_id}",
        "created": created,
        "model": body.model,
        "with_usage": with_usage,
    }
    error: ev.Error | None = None
    streamed_chars = 0
    try:
        yield wire.sse(wire.chunk_json(delta={"role": "assistant", "content": ""}, **base))
        async for event in turn.events(until_done=True):
            if isinstance(event, ev.ReplyDelta) and event.text:
                streamed_chars += len(event.text)
                yield wire.sse(wire.chunk_json(delta={"content": event.text}, **base))
            elif isinstance(event, ev.Error) and event.code != ErrorCode.SAFETY_REJECTED:
                error = event
    finally:
        if turn.final is None:  # the client left: its turn is cancelled, its tokens count
            _count_left_stream(turn, caller, estimated_tokens(body, streamed_chars))
    done = turn.final
    if done is not None:
        await _tokens_count(turn, caller, done)
    if done is not None and done.status == "done":
        yield wire.sse(wire.chunk_json(delta={}, finish=done.finish_reason or "stop", **base))
    else:
        yield wire.sse(_turn_failed(turn, error).body())
    if with_usage and done is not None:
        yield wire.sse(wire.chunk_json(delta=None, usage=done.usage, **base))
    yield wire.sse("[DONE]")
