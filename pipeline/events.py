"""Server events: frozen dataclasses, one per PROTOCOL.md server frame.

``run_turn`` yields these (plus ``ReplyDelta``, the un-numbered model text that the turn
runtime coalesces into ``StreamDelta`` frames); the WebSocket consumer renders them with
``to_frame()``, the ``/v1`` endpoint and channel adapters render them their own way.
``to_frame()`` drops optional fields that are ``None`` and turns tuples into lists.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """Base of every event; ``TYPE`` is the PROTOCOL.md ``type``."""

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
    """The pre-processing result; title/icon/category/tags only on a first message."""

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
    TYPE: ClassVar[str] = "stream.snapshot"
    chat_id: str
    task_id: str
    message_id: str
    sequence: int
    content: str


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


@dataclass(frozen=True, slots=True)
class EmbedUpdate(ServerEvent):
    TYPE: ClassVar[str] = "embed.update"
    embed_id: str
    status: str
    content: str | None = None


@dataclass(frozen=True, slots=True)
class StreamDone(ServerEvent):
    """``usage``: ``{"prompt_tokens": int, "completion_tokens": int}``."""

    TYPE: ClassVar[str] = "stream.done"
    chat_id: str
    task_id: str
    message_id: str
    content: str
    model: str
    usage: dict[str, int]
    status: str  # done | interrupted | cancelled | failed


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
    TYPE: ClassVar[str] = "sync.phase"
    phase: int
    chats: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class SyncDone(ServerEvent):
    TYPE: ClassVar[str] = "sync.done"
    total_chats: int


@dataclass(frozen=True, slots=True)
class Pong(ServerEvent):
    TYPE: ClassVar[str] = "pong"
    ts: str | int | float | None = None


@dataclass(frozen=True, slots=True)
class Error(ServerEvent):
    TYPE: ClassVar[str] = "error"
    code: str
    message: str
    request_id: str | None = None
    chat_id: str | None = None
    task_id: str | None = None
    message_id: str | None = None
