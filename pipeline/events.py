"""Server events: frozen dataclasses, one per server frame of docs/protocol.md §4.

``run_turn`` yields these (plus ``ReplyDelta``, the un-numbered model text that the turn
runtime coalesces into ``StreamDelta`` frames); the WebSocket consumer renders them with
``to_frame()``, the ``/v1`` endpoint and channel adapters render them their own way.
``to_frame()`` drops optional fields that are ``None`` and turns tuples into lists.

Every rendered frame stays within the protocol's size limit (``pipeline.protocol``: 256
KiB, 4 MiB for ``sync.*``), measured as the consumer sends it (JSON without ASCII
escaping, UTF-8): a ``stream.done`` or ``embed.update`` whose text would not fit leaves
it out (``content_omitted: true``); ``stream.snapshot`` and ``sync.phase`` events render
as several frames when needed (``to_frames()``); the runtime cuts delta text with
:func:`delta_pieces` before numbering it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pipeline.protocol import MAX_BULK_FRAME_BYTES, MAX_FRAME_BYTES

# Room for a frame's fields besides its one long text (ids, type, numbers, usage).
_FRAME_FIELDS_BYTES = 4 * 1024
# JSON text of one character is at most 6 bytes (a control character as \u00XX).
_JSON_BYTES_PER_CHAR = 6
# The most text one stream.delta (or one stream.snapshot part) carries, in characters:
# whatever it holds, the frame stays under MAX_FRAME_BYTES.
MAX_TEXT_CHARS_PER_FRAME = (MAX_FRAME_BYTES - _FRAME_FIELDS_BYTES) // _JSON_BYTES_PER_CHAR


def frame_bytes(frame: dict[str, Any]) -> int:
    """Size in bytes of ``frame`` as the consumer sends it (JSON, no ASCII escaping, UTF-8)."""
    return len(json.dumps(frame, ensure_ascii=False).encode("utf-8"))


def delta_pieces(text: str) -> list[str]:
    """``text`` cut into pieces of at most :data:`MAX_TEXT_CHARS_PER_FRAME` characters.

    Their concatenation is ``text``; an empty text gives no piece.
    """
    step = MAX_TEXT_CHARS_PER_FRAME
    return [text[start : start + step] for start in range(0, len(text), step)]


def _without_long_text(frame: dict[str, Any], name: str) -> dict[str, Any]:
    """``frame``, or when it exceeds MAX_FRAME_BYTES, ``frame`` without its field ``name``
    and with ``content_omitted: true`` (a cheap bound skips the measuring of short text)."""
    text = frame.get(name)
    if not isinstance(text, str) or len(text) <= MAX_TEXT_CHARS_PER_FRAME:
        return frame
    if frame_bytes(frame) <= MAX_FRAME_BYTES:
        return frame
    trimmed = {key: value for key, value in frame.items() if key != name}
    trimmed["content_omitted"] = True
    return trimmed


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """Base of every event; ``TYPE`` is the ``type`` of docs/protocol.md §4."""

    TYPE: ClassVar[str] = ""

    def to_frame(self) -> dict[str, Any]:
        """The JSON-ready frame: ``{"type": TYPE, field: value, ...}``."""
        frame: dict[str, Any] = {"type": self.TYPE}
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is None:
                continue
            frame[spec.name] = list(value) if isinstance(value, tuple) else value
        return frame

    def to_frames(self) -> list[dict[str, Any]]:
        """The frames this event is sent as, each within its size limit (usually one)."""
        return [self.to_frame()]


@dataclass(frozen=True, slots=True)
class ChatCreated(ServerEvent):
    TYPE: ClassVar[str] = "chat.created"
    chat_id: str
    version: int
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChatUpdated(ServerEvent):
    TYPE: ClassVar[str] = "chat.updated"
    chat_id: str
    version: int
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChatDeleted(ServerEvent):
    TYPE: ClassVar[str] = "chat.deleted"
    chat_id: str
    version: int
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageAccepted(ServerEvent):
    TYPE: ClassVar[str] = "message.accepted"
    chat_id: str
    message_id: str
    task_id: str
    assistant_message_id: str


@dataclass(frozen=True, slots=True)
class TaskQueued(ServerEvent):
    TYPE: ClassVar[str] = "task.queued"
    chat_id: str
    message_id: str
    task_id: str
    position: int


@dataclass(frozen=True, slots=True)
class TaskActive(ServerEvent):
    """``tasks``: dicts ``{chat_id, task_id, message_id, assistant_message_id, last_sequence}``."""

    TYPE: ClassVar[str] = "task.active"
    tasks: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class RequestChatHistory(ServerEvent):
    TYPE: ClassVar[str] = "request_chat_history"
    chat_id: str
    request_id: str
    reason: str  # cache_miss | decryption_failed | incomplete
    expected_messages: int


@dataclass(frozen=True, slots=True)
class PreprocessDone(ServerEvent):
    """The pre-processing result; title/icon/category/tags only on a first message;
    ``tool_reasons``: each of ``tools`` → why it was offered (not on a title's frame)."""

    TYPE: ClassVar[str] = "preprocess.done"
    chat_id: str
    task_id: str
    language: str
    tier: str
    model: str
    reason: str
    tools: tuple[str, ...]
    mate: str
    title: str | None = None
    icon: str | None = None
    category: str | None = None
    tags: tuple[str, ...] | None = None
    tool_reasons: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class MemoryRequest(ServerEvent):
    TYPE: ClassVar[str] = "memory.request"
    chat_id: str
    request_id: str
    categories: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReplyDelta(ServerEvent):
    """Model text as it arrives; the runtime numbers and coalesces it (not a frame)."""

    TYPE: ClassVar[str] = "reply.delta"
    text: str


@dataclass(frozen=True, slots=True)
class StreamDelta(ServerEvent):
    TYPE: ClassVar[str] = "stream.delta"
    chat_id: str
    task_id: str
    message_id: str
    sequence: int
    delta: str


@dataclass(frozen=True, slots=True)
class StreamSnapshot(ServerEvent):
    """The text of deltas 1…``sequence``.

    Text too long for one frame goes out as consecutive frames, each with a piece of it
    in ``content``, the same ``sequence`` and ``part`` (1, 2, …) of ``parts``; the client
    applies the snapshot once it has the last part.
    """

    TYPE: ClassVar[str] = "stream.snapshot"
    chat_id: str
    task_id: str
    message_id: str
    sequence: int
    content: str

    def to_frames(self) -> list[dict[str, Any]]:
        pieces = delta_pieces(self.content)
        if len(pieces) <= 1:
            return [self.to_frame()]
        frame = self.to_frame()
        return [
            {**frame, "content": piece, "part": number, "parts": len(pieces)}
            for number, piece in enumerate(pieces, start=1)
        ]


@dataclass(frozen=True, slots=True)
class SkillStatus(ServerEvent):
    TYPE: ClassVar[str] = "skill.status"
    chat_id: str
    task_id: str
    embed_id: str
    tool: str
    status: str  # processing | finished | error | cancelled
    preview: str | None = None
    error: str | None = None

    def to_frame(self) -> dict[str, Any]:
        frame = ServerEvent.to_frame(self)
        if self.status == "error":
            # The failure reason clients show for a tool (docs/protocol.md §8).
            frame["reason"] = "tool_failed"
        return frame


@dataclass(frozen=True, slots=True)
class EmbedUpdate(ServerEvent):
    """``content``: left out (``content_omitted: true``) when the frame would exceed the
    limit; the embed then stays in the server's embed cache only."""

    TYPE: ClassVar[str] = "embed.update"
    embed_id: str
    status: str
    content: str | None = None

    def to_frame(self) -> dict[str, Any]:
        return _without_long_text(ServerEvent.to_frame(self), "content")


@dataclass(frozen=True, slots=True)
class StreamDone(ServerEvent):
    """The turn's end. ``usage``: ``{"prompt_tokens": int, "completion_tokens": int}``.

    ``sequence``: the number of the last delta (the reply is deltas 1…``sequence``), when
    the sender knows it. ``finish_reason``: ``"length"`` when the reply was cut at the
    deployment's maximum reply size. ``reason``: why a ``failed`` or ``interrupted`` answer
    ended, the ``reason`` of the turn's ``error`` (docs/protocol.md §8). A ``content`` too
    long for one frame is left out (``content_omitted: true``): the client uses the deltas
    it has, or, missing some, reads the server's copy of the reply (REST
    ``GET /api/chats/<id>/messages/``).
    """

    TYPE: ClassVar[str] = "stream.done"
    chat_id: str
    task_id: str
    message_id: str
    content: str
    model: str
    usage: dict[str, int]
    status: str  # done | interrupted | cancelled | failed
    sequence: int | None = None
    finish_reason: str | None = None
    # The answer's language (ISO 639-1), also for a client that missed preprocess.done
    # (it resumed the turn after a reload).
    language: str | None = None
    reason: str | None = None

    def to_frame(self) -> dict[str, Any]:
        return _without_long_text(ServerEvent.to_frame(self), "content")


@dataclass(frozen=True, slots=True)
class PostprocessDone(ServerEvent):
    TYPE: ClassVar[str] = "postprocess.done"
    chat_id: str
    task_id: str
    follow_ups: tuple[str, ...]
    memories_saved: int
    summary: str | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class MessageStored(ServerEvent):
    TYPE: ClassVar[str] = "message.stored"
    chat_id: str
    message_id: str
    version: int


@dataclass(frozen=True, slots=True)
class TaskCancelled(ServerEvent):
    TYPE: ClassVar[str] = "task.cancelled"
    chat_id: str
    task_id: str


@dataclass(frozen=True, slots=True)
class SyncPhase(ServerEvent):
    """One sync phase's chats; ``to_frames()`` spreads them over as many ``sync.phase``
    frames (same ``phase``) as keep each within 4 MiB, a chat with more messages than
    fit in one frame over several (each copy with its metadata and some messages)."""

    TYPE: ClassVar[str] = "sync.phase"
    phase: int
    chats: tuple[dict[str, Any], ...]

    def to_frames(self) -> list[dict[str, Any]]:
        budget = MAX_BULK_FRAME_BYTES - _FRAME_FIELDS_BYTES
        frames: list[dict[str, Any]] = []
        batch: list[dict[str, Any]] = []
        used = 0
        for chat in self.chats:
            for piece, size in _chat_pieces(chat, budget):
                if batch and used + size > budget:
                    frames.append({"type": self.TYPE, "phase": self.phase, "chats": batch})
                    batch, used = [], 0
                batch.append(piece)
                used += size
        if batch or not frames:
            frames.append({"type": self.TYPE, "phase": self.phase, "chats": batch})
        return frames


def _chat_pieces(chat: dict[str, Any], budget: int) -> list[tuple[dict[str, Any], int]]:
    """``chat`` as ``[(chat object, JSON bytes + 1)]``: itself when it fits ``budget``,
    else copies of its metadata each with as many of its messages as fit."""
    size = frame_bytes(chat) + 1
    messages = chat.get("messages")
    if size <= budget or not messages:
        return [(chat, size)]
    meta = {key: value for key, value in chat.items() if key != "messages"}
    base = frame_bytes({**meta, "messages": []}) + 1
    pieces: list[tuple[dict[str, Any], int]] = []
    group: list[dict[str, Any]] = []
    used = base
    for message in messages:
        cost = frame_bytes(message) + 1
        if group and used + cost > budget:
            pieces.append(({**meta, "messages": group}, used))
            group, used = [], base
        group.append(message)
        used += cost
    pieces.append(({**meta, "messages": group}, used))
    return pieces


@dataclass(frozen=True, slots=True)
class SyncDone(ServerEvent):
    """The end of a sync: ``total_chats`` the phases carried, ``deleted`` the chat ids the
    request's ``known`` named that the user no longer has (at most 10,000: 4 MiB)."""

    TYPE: ClassVar[str] = "sync.done"
    total_chats: int
    deleted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pong(ServerEvent):
    TYPE: ClassVar[str] = "pong"
    ts: str | int | float | None = None


@dataclass(frozen=True, slots=True)
class Error(ServerEvent):
    """``reason``: for a failed model call, one of ``openmates.llm.FAILURE_REASONS``
    (docs/protocol.md §8), ``message`` then being that reason's text for people;
    ``retry_after``: for ``rate_limited``, whole seconds until the limit frees (§10)."""

    TYPE: ClassVar[str] = "error"
    code: str
    message: str
    request_id: str | None = None
    chat_id: str | None = None
    task_id: str | None = None
    message_id: str | None = None
    reason: str | None = None
    retry_after: int | None = None
