"""OpenAI's chat-completions wire format: the request OpenMates accepts and what it sends.

Request (``POST /v1/chat/completions``; docs/api.md §3): ``model`` (an instance slug),
``messages`` (at most :data:`MAX_MESSAGES`; ``role`` ``system`` / ``developer`` / ``user``
/ ``assistant`` / ``tool``, ``content`` a string or a list of ``{"type": "text", "text"}``
and ``{"type": "image_url", "image_url": {"url": "data:…"}}`` parts; the last message is
the user's),
``stream``, ``stream_options.include_usage``, ``stop`` (a string or up to 4 strings),
``temperature`` (0-2), ``max_tokens`` / ``max_completion_tokens``, ``user`` (recorded,
never used to pick data), ``n`` (1 only). Client-side ``tools`` /
``functions`` and images given by a URL to fetch are refused; the last message's images
need a model that sees them (``openai_api.views``), an earlier message's are
:data:`EARLIER_IMAGE`. ``top_p`` (0-1), ``presence_penalty`` /
``frequency_penalty`` (-2 to 2) and ``seed`` are checked but not used; other fields
OpenMates does not use are ignored, as OpenAI-compatible servers commonly do.

The typed fields are strict, as OpenAI's API is: a number is a JSON number (an integer
is a number, so ``temperature: 1`` is accepted), an integer a JSON integer, a boolean
``true`` / ``false``; ``"1"``, ``"yes"``, ``5.0`` for an integer or ``true`` for a number
are 400 ``invalid_type``, never coerced. Each may be ``null`` (OpenAI's default).

Responses follow https://platform.openai.com/docs/api-reference/chat/object and
``…/chat/streaming``: a ``chat.completion`` object, or ``chat.completion.chunk`` server-sent
events ending with ``data: [DONE]``; with ``include_usage`` every chunk carries
``"usage": null`` and one last chunk has empty ``choices`` and the usage.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from openmates.rest import MAX_JSON_DEPTH, depth_exceeds
from pipeline.protocol import MAX_CONTENT_BYTES

MAX_STOP = 4
MAX_MESSAGES = 1_000


class WireError(Exception):
    """A request OpenMates refuses: HTTP status and OpenAI's ``type`` / ``code`` / ``param``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = (
            status,
            message,
            type_,
            code,
            param,
        )
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool | None = Field(default=None, strict=True)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The accepted body; see the module docstring."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=64)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool | None = Field(default=None, strict=True)
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, strict=True)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, strict=True)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0, strict=True)
    seed: int | None = Field(default=None, strict=True)
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    user: str | None = Field(default=None, max_length=256)
    n: int | None = Field(default=None, strict=True)
    tools: list[Any] | None = None
    functions: list[Any] | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences")
        return value


IMAGE_PART_TYPES = ("image_url", "input_image", "image")
# An earlier message's image in a seeded history: the model sees that there was one,
# as the AI cache keeps "[image: name]" for a browser's (docs/protocol.md §13).
EARLIER_IMAGE = "[image]"
_DATA_URL = re.compile(r"data:(?P<mime>[A-Za-z0-9.+/-]+);base64,(?P<data>[A-Za-z0-9+/=\s]*)")


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image of the last user message: its MIME type (lower case) and base64 data,
    from a ``data:`` URL, not yet checked to be an image of that type; ``param`` names
    its part (``messages.N.content.M``) for an error."""

    mime: str
    data_b64: str
    param: str


def _text_of(part: dict[str, Any], *, where: str) -> str:
    """The ``text`` of a ``{"type": "text"}`` part at ``where`` (``messages.N.content.M``).

    Raises:
        WireError: ``text`` missing (``missing_required_parameter``) or not a string
            (``invalid_type``), 400, ``param`` naming ``….text``.
    """
    text = part.get("text")
    if isinstance(text, str):
        return text
    if "text" not in part:
        raise WireError(
            400,
            f"{where}: a text part needs its 'text' field.",
            code="missing_required_parameter",
            param=f"{where}.text",
        )
    raise WireError(
        400, f"{where}.text: must be a string.", code="invalid_type", param=f"{where}.text"
    )


def _unsupported_part(kind: Any, *, where: str) -> WireError:
    return WireError(
        400, f"Unsupported content part type {kind!r}.", code="invalid_type", param=where
    )


def part_text(content: str | list[dict[str, Any]] | None, *, where: str) -> str:
    """An earlier message's text: the string, or its text parts joined, each image part
    as :data:`EARLIER_IMAGE`.

    Raises:
        WireError: a part of an unknown type, a text part without a string ``text`` (400).
    """
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for number, part in enumerate(content):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text_of(part, where=f"{where}.{number}"))
        elif kind in IMAGE_PART_TYPES:
            texts.append(EARLIER_IMAGE)
        else:
            raise _unsupported_part(kind, where=where)
    return "\n".join(texts)


def message_content(
    content: str | list[dict[str, Any]] | None, *, where: str
) -> tuple[str, list[ImagePart]]:
    """The last user message's text (its text parts joined) and its images.

    An image part is ``{"type": "image_url", "image_url": {"url": "data:<mime>;base64,
    <data>"}}`` (``detail`` is ignored). A URL to fetch is refused: the server fetches
    nothing on a client's behalf.

    Raises:
        WireError: an image given by an ``http(s)`` or other non-``data:`` URL
            (``image_url_not_supported``), a malformed ``data:`` URL or one of a type not
            an image (``invalid_image``), a part of an unknown type (all 400).
    """
    if content is None or isinstance(content, str):
        return content or "", []
    texts, images = [], []
    for number, part in enumerate(content):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text_of(part, where=f"{where}.{number}"))
        elif kind in IMAGE_PART_TYPES:
            images.append(_image_part(part, where=f"{where}.{number}"))
        else:
            raise _unsupported_part(kind, where=where)
    return "\n".join(texts), images


def _image_part(part: dict[str, Any], *, where: str) -> ImagePart:
    field = part.get("image_url")
    url = field.get("url") if isinstance(field, dict) else field
    if not isinstance(url, str):
        raise WireError(
            400, "An image part needs image_url.url.", code="invalid_image", param=where
        )
    if not url.startswith("data:"):
        raise WireError(
            400,
            "Images are not fetched from URLs: send the image inline as a data URL "
            "(data:image/png;base64,…).",
            code="image_url_not_supported",
            param=where,
        )
    match = _DATA_URL.fullmatch(url)
    if match is None or not match["mime"].lower().startswith("image/"):
        raise WireError(
            400,
            "An image must be a base64 data URL of an image type (data:image/png;base64,…).",
            code="invalid_image",
            param=where,
        )
    return ImagePart(
        mime=match["mime"].lower(), data_b64="".join(match["data"].split()), param=where
    )


_TOO_DEEP = f"The body nests deeper than {MAX_JSON_DEPTH} levels."


class _NotFiniteError(ValueError):
    """A JSON number too large for a double (``1e999``): Python reads it as infinity."""


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFiniteError(text)
    return value


def _validation_code(kind: str) -> str:
    """The stable ``code`` for a pydantic error ``kind``: ``missing_required_parameter``
    for an absent field, ``invalid_type`` for a value of the wrong JSON type (pydantic's
    ``float_type``, ``string_type`` …, as OpenAI names them), else ``invalid_value``."""
    if kind == "missing":
        return "missing_required_parameter"
    return "invalid_type" if kind.endswith("_type") else "invalid_value"


def parse_request(body: bytes) -> ChatRequest:
    """Parse and check a chat-completions body.

    Raises:
        WireError: not JSON (also NaN or Infinity, which JSON does not have, a number
            beyond a double's range such as ``1e999``, and nesting deeper than
            ``openmates.rest.MAX_JSON_DEPTH``: ``invalid_json``), a field of the wrong type
            (``invalid_type``), ``n`` > 1, client-side tools, a last message that is not the
            user's (all 400).
    """
    try:
        data = json.loads(
            body or b"null", parse_constant=_refuse_constant, parse_float=_finite_float
        )
    except RecursionError:
        raise WireError(400, _TOO_DEEP, code="invalid_json") from None
    except _NotFiniteError as exc:
        raise WireError(
            400,
            f"The body holds the number {str(exc)[:32]}, too large for a double: JSON "
            "numbers must be finite.",
            code="invalid_json",
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise WireError(400, "The body is not valid JSON.", code="invalid_json") from None
    if depth_exceeds(data, MAX_JSON_DEPTH):
        raise WireError(400, _TOO_DEEP, code="invalid_json")
    if not isinstance(data, dict):
        raise WireError(400, "The body must be a JSON object.", code="invalid_json")
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # A JSON escape of a lone UTF-16 surrogate parses but is not text: it could be
        # neither sealed nor sent to a model (docs/protocol.md §2 refuses it alike).
        raise WireError(
            400, "The body holds a lone UTF-16 surrogate: not valid Unicode.", code="invalid_json"
        ) from None
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        code = _validation_code(first["type"])
        raise WireError(400, f"{param}: {first['msg']}", code=code, param=param) from None
    if request.n is not None and request.n != 1:
        raise WireError(400, "Only n=1 is supported.", code="unsupported_value", param="n")
    if request.tools or request.functions:
        raise WireError(
            400,
            "Client-side tools are not supported: the instance runs its own tools.",
            code="unsupported_parameter",
            param="tools",
        )
    if request.messages[-1].role != "user":
        raise WireError(
            400, "The last message must be the user's.", code="invalid_value", param="messages"
        )
    for index, message in enumerate(request.messages):
        _content_bounded(message, param=f"messages.{index}.content")
    return request


def _content_bounded(message: ChatMessage, *, param: str) -> None:
    """A user message's text is at most ``MAX_CONTENT_BYTES`` of UTF-8, as on the
    WebSocket (docs/protocol.md §2): pre-processing reads all of it on the event loop."""
    if message.role != "user" or message.content is None:
        return
    parts = [message.content] if isinstance(message.content, str) else message.content
    size = sum(
        len(part.encode("utf-8"))
        if isinstance(part, str)
        else len(str(part.get("text", "")).encode("utf-8"))
        for part in parts
    )
    if size > MAX_CONTENT_BYTES:
        raise WireError(
            400,
            f"A user message may hold at most {MAX_CONTENT_BYTES // 1024} KiB of text.",
            code="string_above_max_length",
            param=param,
        )


def end_user(request: ChatRequest) -> str:
    """The request's ``user`` to record: control and format characters (Unicode
    category C: newlines, NUL, bidi overrides …) removed, spaces trimmed, at most 256
    characters; "" when absent."""
    kept = "".join(ch for ch in request.user or "" if unicodedata.category(ch)[0] != "C")
    return kept.strip()[:256]


def main_call_options(request: ChatRequest) -> dict[str, Any]:
    """The client's sampling options for the main model call (``openmates.llm``)."""
    options: dict[str, Any] = {}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    limit = request.max_completion_tokens or request.max_tokens
    if limit is not None:
        options["max_tokens"] = limit
    if request.stop:
        options["stop"] = [request.stop] if isinstance(request.stop, str) else request.stop
    return options


def usage_json(usage: dict[str, int]) -> dict[str, int]:
    """OpenAI's ``usage`` from a turn's ``{"prompt_tokens", "completion_tokens"}``."""
    prompt = int(usage.get("prompt_tokens", 0))
    completion = int(usage.get("completion_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_json(
    *, completion_id: str, created: int, model: str, text: str, finish: str, usage: dict[str, int]
) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage_json(usage),
    }


def chunk_json(
    *,
    completion_id: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish: str | None = None,
    with_usage: bool = False,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk``; ``delta`` None is the usage chunk (empty ``choices``)."""
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if with_usage:
        chunk["usage"] = usage_json(usage) if usage is not None else None
    return chunk


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
