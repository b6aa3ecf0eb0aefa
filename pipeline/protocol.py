"""Validation of client frames on ``/ws/chat/`` (docs/protocol.md is the contract).

``parse_frame(text)`` turns one WebSocket text frame into a frozen pydantic model, one
class per client frame type, or raises ``FrameError`` carrying the docs/protocol.md §8 error code:

* ``frame_too_large``: more than 256 KiB (4 MiB for the bulk frames ``chat.history``,
  ``message.store`` and ``sync.*``), a user message's ``content`` over 64 KiB of UTF-8, an
  assistant message's over :data:`MAX_REPLY_BYTES`, or an ``encrypted_content`` longer than
  the envelope of the longest reply (:data:`MAX_MESSAGE_CIPHERTEXT_CHARS`);
* ``unknown_type``: a JSON object whose ``type`` is not a client frame type;
* ``invalid_frame``: anything else wrong (not strict JSON, including NaN/Infinity, numbers
  overflowing a float, integers past Python's digit limit and nesting past the recursion
  limit; a string anywhere that is not strict UTF-8, i.e. a lone surrogate; not an
  object; a missing or mistyped field; an id that is not a UUIDv7; a ciphertext that is
  not docs/crypto.md §3's envelope).

Validation is strict (no coercion: ``"3"`` is not a version) and extra fields are ignored,
because docs/protocol.md §1 lets clients add fields.

:class:`ErrorCode` holds the §8 codes; :func:`error_for_exception` is the one mapping of an
unexpected failure (Vault, Redis, a model call, anything else) to a code and message, for
the consumer and the turn alike, and :func:`error_reason` gives a model call's reason.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal, get_args

import redis
from django.conf import settings
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from openmates import llm
from openmates.ids import (
    MAX_FILE_BYTES,
    MAX_FILES_BYTES,
    MAX_MESSAGE_CIPHERTEXT_CHARS,
    MAX_REPLY_BYTES,
    envelope_problem,
    is_uuid7,
)
from openmates.ids import ciphertext_chars as ciphertext_chars  # one of the size limits
from openmates.vault import VaultError
from pipeline.file_types import file_kind
from pipeline.injection import strip_invisible

logger = logging.getLogger(__name__)

# The size limits, all in one place; the others are derived from these.
MAX_FRAME_BYTES = 256 * 1024
MAX_BULK_FRAME_BYTES = 4 * 1024 * 1024
BULK_FRAME_TYPES = frozenset({"chat.history", "message.store"})
# A user's message (what message.send carries).
MAX_CONTENT_BYTES = 64 * 1024
# The longest reply the server produces (MAX_REPLY_BYTES, ``max_reply_bytes``) and the
# envelope of one that long (MAX_MESSAGE_CIPHERTEXT_CHARS) come from openmates.ids, since
# the REST API takes the same.
# The stored envelope and its frame's other fields fit in one bulk frame.
assert MAX_MESSAGE_CIPHERTEXT_CHARS + MAX_FRAME_BYTES <= MAX_BULK_FRAME_BYTES
# A message.send with files is a bulk frame: their base64 and the rest of the frame fit.
MAX_FILES = 8
assert 4 * -(-MAX_FILES_BYTES // 3) + MAX_FRAME_BYTES * 2 <= MAX_BULK_FRAME_BYTES


def max_file_bytes() -> int:
    """One attached file's limit in bytes: ``PIPELINE_MAX_FILE_BYTES``, never above
    :data:`openmates.ids.MAX_FILE_BYTES` (docs/protocol.md §13)."""
    return max(1, min(int(settings.PIPELINE_MAX_FILE_BYTES), MAX_FILE_BYTES))


def max_files_bytes() -> int:
    """A message's files' limit in bytes together: ``PIPELINE_MAX_FILES_BYTES``, never
    above :data:`openmates.ids.MAX_FILES_BYTES`."""
    return max(1, min(int(settings.PIPELINE_MAX_FILES_BYTES), MAX_FILES_BYTES))


def max_files() -> int:
    """How many files one message may carry: ``PIPELINE_MAX_FILES``, at most 8."""
    return max(0, min(int(settings.PIPELINE_MAX_FILES), MAX_FILES))


def max_reply_bytes() -> int:
    """The reply cap of this deployment in UTF-8 bytes: ``PIPELINE_MAX_REPLY_BYTES``,
    never above :data:`MAX_REPLY_BYTES` (what clients can store and send back)."""
    configured = int(settings.PIPELINE_MAX_REPLY_BYTES)
    return max(1, min(configured, MAX_REPLY_BYTES))


_SLUG_RE = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
_TOOL_RE = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
_REQUEST_ID_RE = re.compile(r"^[-a-zA-Z0-9_.:]{1,128}$")
_SIZE_ERROR = "content_too_large"
_FILE_SIZE_ERROR = "file_too_large"
_FILE_TYPE_ERROR = "unsupported_file"
# A JSON escape of a UTF-16 surrogate, or a raw surrogate (a server hands over decoded
# UTF-8, so only the escape happens on the wire; the raw form guards in-process callers).
_SURROGATE_ESCAPE_RE = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")


# Said for a Vault refusal that retrying cannot fix (a missing key, a refused token).
VAULT_SETUP_FAULT = (
    "Your account's encryption key is missing or not permitted; ask the administrator."
)


class ErrorCode(StrEnum):
    """The error codes of docs/protocol.md §8, exactly."""

    INVALID_FRAME = "invalid_frame"
    FRAME_TOO_LARGE = "frame_too_large"
    UNKNOWN_TYPE = "unknown_type"
    NOT_FOUND = "not_found"
    # The chat is the user's but its instance no longer counts them as a member: readable,
    # not answerable (no turn spends the instance's provider keys for them).
    FORBIDDEN = "forbidden"
    # A server-managed chat (/v1, a channel): the server keeps its content, so it takes no
    # client ciphertext and no turn from a socket (chats.services.ReadOnlyChat).
    READ_ONLY = "read_only"
    CONFLICT = "conflict"
    BUSY = "busy"
    RATE_LIMITED = "rate_limited"
    SAFETY_REJECTED = "safety_rejected"
    PROVIDER_ERROR = "provider_error"
    VAULT_UNAVAILABLE = "vault_unavailable"
    CACHE_UNAVAILABLE = "cache_unavailable"
    # No chat.history answered the turn's request_chat_history within its wait (a client
    # that does not answer it), unlike cache_unavailable: Redis itself failing.
    HISTORY_TIMEOUT = "history_timeout"
    INTERNAL = "internal"
    # docs/protocol.md §13: an attached file over its limit, or one that cannot be read.
    FILE_TOO_LARGE = "file_too_large"
    UNSUPPORTED_FILE = "unsupported_file"


def error_for_exception(exc: BaseException, *, doing: str) -> tuple[ErrorCode, str]:
    """The ``error`` code and message for an unexpected failure while ``doing`` something
    (``"frame"``, ``"turn <task id>"``: named in the log), logged as it deserves.

    A Vault outage is ``vault_unavailable`` and a Redis failure ``cache_unavailable``
    (both worth retrying, logged as warnings); a Vault refusal (a missing key, a refused
    token) is ``internal`` with :data:`VAULT_SETUP_FAULT`, logged as an error, since
    retrying will not help; a failed model call (``openmates.llm.LLMError``) is
    ``provider_error`` with its reason's text (:func:`error_reason` gives the reason);
    anything else is ``internal``, logged with its traceback.
    """
    if isinstance(exc, VaultError) and exc.is_outage:
        logger.warning("%s: Vault unavailable: %s", doing, exc)
        return ErrorCode.VAULT_UNAVAILABLE, "The key service is unavailable; try again shortly."
    if isinstance(exc, VaultError):
        logger.error("%s: Vault refused: %s", doing, exc)
        return ErrorCode.INTERNAL, VAULT_SETUP_FAULT
    if isinstance(exc, redis.RedisError):
        logger.warning("%s: Redis unavailable: %r", doing, exc, exc_info=exc)
        return ErrorCode.CACHE_UNAVAILABLE, "The cache is unavailable; try again shortly."
    if isinstance(exc, llm.LLMError):
        logger.warning("%s: model call failed: %s (%s)", doing, exc.code, exc)
        return ErrorCode.PROVIDER_ERROR, llm.FAILURE_REASONS[exc.reason]
    logger.error("%s failed", doing, exc_info=exc)
    return ErrorCode.INTERNAL, "Something went wrong; try again."


def error_reason(exc: BaseException) -> str | None:
    """The ``reason`` of the ``error`` frame for ``exc``: a model call's failure reason
    (``openmates.llm.FAILURE_REASONS``, docs/protocol.md §8), else None."""
    return exc.reason if isinstance(exc, llm.LLMError) else None


class FrameError(Exception):
    """A client frame that cannot be accepted; becomes an ``error`` frame, never a close.

    ``ids`` holds whichever of request_id/chat_id/task_id/message_id the frame carried
    (so the client can tell which of its requests failed); ``retry_after``, set for
    ``rate_limited``, the whole seconds until the limit's window frees.
    """

    retry_after: int | None = None

    def __init__(self, code: ErrorCode, message: str, **ids: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ids = ids


def _uuid7(value: str) -> str:
    if not is_uuid7(value):
        raise PydanticCustomError("uuid7", "must be a lowercase UUIDv7 string")
    return value


def _slug(value: str) -> str:
    if not _SLUG_RE.match(value):
        raise PydanticCustomError("slug", "must be 1-64 letters, digits, '-' or '_'")
    return value


def _tool_name(value: str) -> str:
    if not _TOOL_RE.match(value):
        raise PydanticCustomError("tool_name", "must be a tool name")
    return value


def _request_id(value: str) -> str:
    if not _REQUEST_ID_RE.match(value):
        raise PydanticCustomError("request_id", "must be 1-128 characters of [-A-Za-z0-9_.:]")
    return value


def _envelope(value: str) -> str:
    if len(value) > MAX_MESSAGE_CIPHERTEXT_CHARS:
        raise PydanticCustomError(
            _SIZE_ERROR, f"is longer than {MAX_MESSAGE_CIPHERTEXT_CHARS} characters"
        )
    problem = envelope_problem(value)
    if problem is not None:
        raise PydanticCustomError("ciphertext", problem)
    return value


def content_blank(value: str) -> bool:
    """True when ``value`` shows nothing: only whitespace and invisible characters
    (zero-width, bidi controls, tag characters: ``pipeline.injection.strip_invisible``)."""
    return not strip_invisible(value).strip()


def _content_within(value: str, limit: int) -> str:
    if len(value.encode("utf-8")) > limit:
        raise PydanticCustomError(_SIZE_ERROR, f"is larger than {limit // 1024} KiB of UTF-8")
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL, and no message needs one.
        raise PydanticCustomError("null_character", "must not contain NUL characters")
    if content_blank(value):
        raise PydanticCustomError("empty", "must not be empty")
    return value


def _content(value: str) -> str:
    return _content_within(value, MAX_CONTENT_BYTES)


Uuid7 = Annotated[str, AfterValidator(_uuid7)]
Slug = Annotated[str, AfterValidator(_slug)]
ToolName = Annotated[str, AfterValidator(_tool_name)]
RequestId = Annotated[str, AfterValidator(_request_id)]
Ciphertext = Annotated[str, AfterValidator(_envelope)]
Content = Annotated[str, AfterValidator(_content)]
Version = Annotated[int, Field(ge=0)]
Role = Literal["user", "assistant"]
Tier = Literal["fast", "standard", "heavy"]
MemoryCategory = Literal["preference", "fact", "event", "relationship", "decision", "general"]
MEMORY_CATEGORIES: tuple[str, ...] = get_args(MemoryCategory)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class HistoryMessage(_Model):
    """One message of a client-supplied history (oldest first).

    ``content``: a user message at most 64 KiB of UTF-8, an assistant reply at most
    :data:`MAX_REPLY_BYTES` (the longest the server produces).
    """

    message_id: Uuid7
    role: Role
    content: str

    @field_validator("content")
    @classmethod
    def _content_for_role(cls, value: str, info: ValidationInfo) -> str:
        assistant = info.data.get("role") == "assistant"
        return _content_within(value, MAX_REPLY_BYTES if assistant else MAX_CONTENT_BYTES)


class HistoryFile(_Model):
    """A file of an earlier user message, sent again with ``chat.history``
    (docs/protocol.md §13): as :class:`FileAttachment`, but ``data`` may be left out (an
    image, which the history only names, or a file there was no room for in the frame).
    Checked here: the base64 and the size (``file_too_large``). Its type and content are
    not: the message was accepted with it, and one that does not read becomes a note in
    the message's text (``pipeline.files.earlier_file``) rather than a refused history
    the turn would wait on."""

    embed_id: Uuid7
    name: Annotated[str, Field(min_length=1, max_length=255)]
    mime: Annotated[str, Field(max_length=127)]
    data: str | None = None

    @field_validator("data")
    @classmethod
    def _decodable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise PydanticCustomError("base64", "data must be standard base64") from None
        if len(decoded) > max_file_bytes():
            name = str(info.data.get("name", "a file"))[:80]
            raise PydanticCustomError(
                _FILE_SIZE_ERROR, f"{name!r} is larger than {_size(max_file_bytes())}"
            )
        return value


class ChatHistoryMessage(HistoryMessage):
    """One message of a ``chat.history`` answer: a user message may carry ``files``, its
    files again (at most 8, distinct embed ids; docs/protocol.md §13)."""

    files: Annotated[list[HistoryFile], Field(max_length=MAX_FILES)] | None = None

    @model_validator(mode="after")
    def _files_of_a_question(self) -> ChatHistoryMessage:
        if self.files and self.role != "user":
            raise PydanticCustomError("files_role", "only a user message carries files")
        if len({f.embed_id for f in self.files or ()}) != len(self.files or ()):
            raise PydanticCustomError("duplicate", "each file needs its own embed_id")
        return self


class Overrides(_Model):
    """Client overrides of pre-processing, honoured only within the user's role."""

    tier: Tier | None = None
    tools: Annotated[list[ToolName], Field(max_length=32)] | None = None
    mate: Slug | None = None


class ChatCreate(_Model):
    type: Literal["chat.create"]
    request_id: RequestId
    chat_id: Uuid7
    instance: Slug
    encrypted_chat_key: Ciphertext
    encrypted_title: Ciphertext | None = None


class ChatUpdate(_Model):
    type: Literal["chat.update"]
    chat_id: Uuid7
    version: Version
    request_id: RequestId | None = None
    encrypted_title: Ciphertext | None = None
    encrypted_summary: Ciphertext | None = None
    encrypted_tags: Ciphertext | None = None
    encrypted_category: Ciphertext | None = None
    encrypted_icon: Ciphertext | None = None
    pinned: bool | None = None


class ChatDelete(_Model):
    type: Literal["chat.delete"]
    chat_id: Uuid7
    request_id: RequestId | None = None


def _size(limit: int) -> str:
    """A byte limit as people read it: ``"2 MiB"``, ``"512 KiB"``, ``"1000 bytes"``."""
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit >= 1024 * 1024:
        return f"{limit / (1024 * 1024):.1f} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"


class FileAttachment(_Model):
    """A file sent with a message (docs/protocol.md §13): the id of the embed the client
    stores it as, its name (1-255 characters), its type and ``data``, standard base64 of
    its bytes. Checked here: the base64, the size (``file_too_large``), that it is an
    image or a text-like file whose first bytes match (``unsupported_file``); a text
    file's UTF-8 and a PDF's text are read before the message is accepted
    (``pipeline.files.turn_file``)."""

    embed_id: Uuid7
    name: Annotated[str, Field(min_length=1, max_length=255)]
    mime: Annotated[str, Field(max_length=127)]
    data: str

    @property
    def size(self) -> int:
        """The file's size in bytes (from its base64's length)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    @model_validator(mode="after")
    def _readable(self) -> FileAttachment:
        limit = max_file_bytes()
        try:
            # The frame's own limit bounds what is decoded here.
            decoded = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError):
            raise PydanticCustomError("base64", "data must be standard base64") from None
        if len(decoded) > limit:
            raise PydanticCustomError(
                _FILE_SIZE_ERROR, f"{self.name[:80]!r} is larger than {_size(limit)}"
            )
        if file_kind(mime=self.mime, name=self.name, head=decoded[:16]) is None:
            raise PydanticCustomError(
                _FILE_TYPE_ERROR,
                f"{self.name[:80]!r} ({self.mime[:40] or 'no type'}) is not an image"
                " (PNG, JPEG, WebP, GIF) or a text-like file (text, code, CSV, JSON, PDF)",
            )
        return self


def _files_check(files: list[FileAttachment]) -> None:
    """A frame's files within the count and total size limits, with distinct embed ids."""
    if len(files) > max_files():
        raise PydanticCustomError("too_many", f"at most {max_files()} files per message")
    if len({f.embed_id for f in files}) != len(files):
        raise PydanticCustomError("duplicate", "each file needs its own embed_id")
    total = sum(f.size for f in files)
    if total > max_files_bytes():
        raise PydanticCustomError(
            _FILE_SIZE_ERROR, f"the files together are larger than {_size(max_files_bytes())}"
        )


class MessageSend(_Model):
    """``parent_id``: the answer the message follows on its branch, ``null`` for a first
    message (an edit of the first question); absent: after the chat's newest message
    (docs/protocol.md §3). ``parent_given`` tells the two apart. ``files``: attached
    files (§13), distinct embed ids, within the count and total size limits."""

    type: Literal["message.send"]
    chat_id: Uuid7
    message_id: Uuid7
    content: Content
    parent_id: Uuid7 | None = None
    history: Annotated[list[HistoryMessage], Field(max_length=500)] | None = None
    overrides: Overrides | None = None
    files: Annotated[list[FileAttachment], Field(max_length=MAX_FILES)] | None = None

    @property
    def parent_given(self) -> bool:
        return "parent_id" in self.model_fields_set

    @model_validator(mode="after")
    def _files_within(self) -> MessageSend:
        _files_check(self.files or [])
        return self


class MessageRetry(_Model):
    """Answer again a question whose turn ended failed, interrupted or cancelled, with
    ``files`` its files again (docs/protocol.md §3, §13)."""

    type: Literal["message.retry"]
    chat_id: Uuid7
    message_id: Uuid7
    files: Annotated[list[FileAttachment], Field(max_length=MAX_FILES)] | None = None

    @model_validator(mode="after")
    def _files_within(self) -> MessageRetry:
        _files_check(self.files or [])
        return self


class MessageRegenerate(_Model):
    """Answer again the question of the answer ``message_id``; ``content`` is that
    question's text for the model and ``files`` its files (docs/protocol.md §3, §13)."""

    type: Literal["message.regenerate"]
    chat_id: Uuid7
    message_id: Uuid7
    content: Content
    overrides: Overrides | None = None
    files: Annotated[list[FileAttachment], Field(max_length=MAX_FILES)] | None = None

    @model_validator(mode="after")
    def _files_within(self) -> MessageRegenerate:
        _files_check(self.files or [])
        return self


class MessageStore(_Model):
    type: Literal["message.store"]
    chat_id: Uuid7
    message_id: Uuid7
    encrypted_content: Ciphertext
    version: Version


class ChatHistory(_Model):
    type: Literal["chat.history"]
    chat_id: Uuid7
    request_id: RequestId
    messages: Annotated[list[ChatHistoryMessage], Field(max_length=10_000)]
    summary: Annotated[str, Field(max_length=MAX_CONTENT_BYTES)] | None = None


class MemoryConsent(_Model):
    """The answer to a ``memory.request`` (its ``request_id``), or without one a change
    made in the chat's UI: ``allowed`` then replaces every answer of the chat
    (docs/protocol.md §3)."""

    type: Literal["memory.consent"]
    chat_id: Uuid7
    request_id: RequestId | None = None
    allowed: Annotated[list[MemoryCategory], Field(max_length=6)]


class TaskCancel(_Model):
    type: Literal["task.cancel"]
    task_id: Uuid7


class SkillCancel(_Model):
    type: Literal["skill.cancel"]
    embed_id: Uuid7


class StreamResume(_Model):
    type: Literal["stream.resume"]
    chat_id: Uuid7
    task_id: Uuid7
    last_sequence: Version


class SyncRequest(_Model):
    type: Literal["sync.request"]
    known: Annotated[dict[Uuid7, Version], Field(max_length=10_000)]


class Ping(_Model):
    type: Literal["ping"]
    ts: Annotated[str, Field(max_length=64)] | int | float | None = None


ClientFrame = (
    ChatCreate
    | ChatUpdate
    | ChatDelete
    | MessageSend
    | MessageRetry
    | MessageRegenerate
    | MessageStore
    | ChatHistory
    | MemoryConsent
    | TaskCancel
    | SkillCancel
    | StreamResume
    | SyncRequest
    | Ping
)

FRAME_TYPES: dict[str, type[_Model]] = {
    "chat.create": ChatCreate,
    "chat.update": ChatUpdate,
    "chat.delete": ChatDelete,
    "message.send": MessageSend,
    "message.retry": MessageRetry,
    "message.regenerate": MessageRegenerate,
    "message.store": MessageStore,
    "chat.history": ChatHistory,
    "memory.consent": MemoryConsent,
    "task.cancel": TaskCancel,
    "skill.cancel": SkillCancel,
    "stream.resume": StreamResume,
    "sync.request": SyncRequest,
    "ping": Ping,
}
_ID_FIELDS = ("request_id", "chat_id", "task_id", "message_id")


def frame_size_limit(frame_type: str, *, with_files: bool = False) -> int:
    """Largest allowed encoded size in bytes for a frame of ``frame_type``.

    The bulk frames (whole histories, a stored reply's envelope, sync answers, and a
    ``message.send``, ``message.retry`` or ``message.regenerate`` ``with_files``) may
    reach 4 MiB; every other frame, in either direction, 256 KiB.
    """
    if frame_type in BULK_FRAME_TYPES or frame_type.startswith("sync."):
        return MAX_BULK_FRAME_BYTES
    if with_files and frame_type in ("message.send", "message.retry", "message.regenerate"):
        return MAX_BULK_FRAME_BYTES
    return MAX_FRAME_BYTES


def _ids_of(raw: dict[str, Any]) -> dict[str, str]:
    # Echo ids only when they look like ids, so an error frame never reflects junk.
    return {
        name: value
        for name in _ID_FIELDS
        if isinstance(value := raw.get(name), str) and _REQUEST_ID_RE.match(value)
    }


_CODE_OF_ERROR = {
    _SIZE_ERROR: ErrorCode.FRAME_TOO_LARGE,
    _FILE_SIZE_ERROR: ErrorCode.FILE_TOO_LARGE,
    _FILE_TYPE_ERROR: ErrorCode.UNSUPPORTED_FILE,
}


def _describe(error: ValidationError) -> tuple[ErrorCode, str]:
    errors = error.errors(include_url=False)
    first = errors[0]
    code = ErrorCode.INVALID_FRAME
    coded = [e for e in errors if e["type"] in _CODE_OF_ERROR]
    if coded:
        first = coded[0]
        code = _CODE_OF_ERROR[first["type"]]
    # Field names and list indexes only: pydantic adds its validators' tags to the path
    # ("ts.constrained-str", "function-after[...]"), which name nothing the client sent.
    where = ".".join(
        str(part) for part in first["loc"] if isinstance(part, int) or _FIELD_RE.match(part)
    )
    return code, f"{where or 'frame'}: {first['msg']}"


_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {literal[:32]} is out of range")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    """True when any string (key or value) in the parsed JSON is not strict UTF-8.

    Iterative, so a deep (but parseable) document cannot exhaust the stack.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _load_json(text: str) -> Any:
    """``json.loads`` for frames: strict JSON only, as ``FrameError(invalid_frame)``.

    Refuses NaN/Infinity (and numbers that overflow to them), integers over Python's digit
    limit, nesting past the interpreter's recursion limit, and lone UTF-16 surrogates in
    any string, so nothing downstream meets a value it cannot encode.
    """
    try:
        raw = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise FrameError(ErrorCode.INVALID_FRAME, "frame is not valid JSON") from None
    except RecursionError:
        raise FrameError(ErrorCode.INVALID_FRAME, "frame is nested too deeply") from None
    except ValueError as error:
        # parse_constant/parse_float refusals, and int()'s digit limit for huge integers.
        detail = str(error)
        if "digits" in detail:
            detail = "an integer has too many digits"
        message = f"frame has an invalid number: {detail}"
        raise FrameError(ErrorCode.INVALID_FRAME, message) from None
    if _SURROGATE_ESCAPE_RE.search(text) and _has_lone_surrogate(raw):
        raise FrameError(
            ErrorCode.INVALID_FRAME,
            "frame contains a lone surrogate escape (\\ud800-\\udfff without its pair),"
            " which is no Unicode text",
        )
    return raw


def parse_frame(text: str | None, bytes_data: bytes | None = None) -> ClientFrame:
    """Validate one WebSocket frame and return its typed model.

    ``text`` is the text frame; a binary frame (``bytes_data``) is refused, since every
    frame is a JSON object. Raises ``FrameError`` with the docs/protocol.md §8 code.
    """
    if text is None:
        raise FrameError(ErrorCode.INVALID_FRAME, "frames must be JSON text, not binary")
    # A character is at most 4 bytes, so most frames skip the encode for the size check.
    size = len(text) if len(text) * 4 <= MAX_FRAME_BYTES else len(text.encode("utf-8", "replace"))
    if size > MAX_BULK_FRAME_BYTES:
        raise FrameError(ErrorCode.FRAME_TOO_LARGE, f"frame of {size} bytes exceeds 4 MiB")
    raw = _load_json(text)
    if not isinstance(raw, dict):
        raise FrameError(ErrorCode.INVALID_FRAME, "frame must be a JSON object")
    ids = _ids_of(raw)
    frame_type = raw.get("type")
    if not isinstance(frame_type, str):
        raise FrameError(ErrorCode.INVALID_FRAME, "frame has no string 'type'", **ids)
    model = FRAME_TYPES.get(frame_type)
    if model is None:
        raise FrameError(ErrorCode.UNKNOWN_TYPE, f"unknown frame type {frame_type[:64]!r}", **ids)
    limit = frame_size_limit(frame_type, with_files=bool(raw.get("files")))
    if size > limit:
        raise FrameError(
            ErrorCode.FRAME_TOO_LARGE,
            f"{frame_type} frame of {size} bytes exceeds {limit // 1024} KiB",
            **ids,
        )
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError as error:
        code, message = _describe(error)
        raise FrameError(code, message, **ids) from None
