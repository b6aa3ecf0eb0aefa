"""Files attached to a message, in the turn's memory only (docs/protocol.md §13).

A ``message.send`` may carry files (``pipeline.protocol.FileAttachment``): images (PNG,
JPEG, WebP, GIF) and text-like files (plain text, Markdown, code, CSV, JSON, … and PDF,
whose text is extracted here). Nothing of them is stored by the server: the browser
keeps each as an encrypted embed, and the turn turns them into

* for the model: the user message's content, the files' text in delimited blocks cut to
  a budget of the model's context, and with a model that sees images (``openmates.llm.
  supports_vision``) each image as an ``image_url`` part with a data URL; a model that
  does not (the bundled base model among them) gets a note in its place;
* for the AI cache and later turns' history: the same text with ``[image: name]`` in
  place of an image (no image bytes are kept).

:func:`file_kind` decides what a file is from its type, name and first bytes;
:func:`turn_file` decodes and extracts (PDF text through pypdf), raising
:class:`UnsupportedFile` for what cannot be read. A history the client sends after a
cache miss brings earlier messages' files again: :func:`earlier_file` reads each (an
image by its name only, a file left out for room as a note) and
:func:`earlier_message_text` makes the message's text as the AI cache keeps it.
"""

from __future__ import annotations

import base64
import io
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.file_types import IMAGE_TYPES, file_kind
from pipeline.prompts import estimate_tokens, fair_shares, text_truncate

logger = logging.getLogger(__name__)

# A PDF's text stops here (pages past it are not read): what a turn can use anyway.
PDF_MAX_PAGES = 500
# What an image counts toward the context in the token budget (a detailed 1024 px image
# is about 765 tokens on OpenAI's models; the estimate leans high).
IMAGE_TOKENS = 1000
# What the files' text may take of the room a model's context leaves after the answer's
# reserve: the history and the rest of the prompt keep the other half.
FILES_CONTEXT_SHARE = 0.5
NO_TEXT = "[no text could be read from this file]"
# An earlier message's file whose bytes a history did not carry (no room in the frame).
LEFT_OUT = "[file: {name} (attached earlier; its content did not fit in this history)]"
_NAME_UNSAFE_RE = re.compile(r"[\x00-\x1f\x7f<>\"]")


class UnsupportedFile(ValueError):  # noqa: N818 - reads as the condition it reports
    """A file that cannot be used: a type not taken, or content that does not read as
    its type (not UTF-8 text, not an image of its type, a PDF pypdf cannot open)."""


@dataclass(frozen=True, slots=True)
class TurnFile:
    """One attached file as the turn uses it: an image's bytes (``kind`` ``"image"``)
    or a text-like file's text (``"text"``; a PDF's extracted text)."""

    embed_id: str
    name: str
    mime: str
    kind: Literal["image", "text"]
    data: bytes = b""
    text: str = ""


def decode_text(data: bytes) -> str:
    """A text file's bytes as text: strict UTF-8 (a BOM dropped), no NUL characters.

    Raises:
        UnsupportedFile: not UTF-8, or binary (a NUL byte).
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnsupportedFile("is not UTF-8 text") from None
    if "\x00" in text:
        raise UnsupportedFile("is binary, not text")
    return text


def pdf_text(data: bytes) -> str:
    """The text of a PDF's pages (at most :data:`PDF_MAX_PAGES`), pages apart by a blank
    line; ``""`` for a PDF with no text layer (a scan).

    Raises:
        UnsupportedFile: pypdf cannot read it (damaged, encrypted with a password).
    """
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise UnsupportedFile("is a password-protected PDF")
        pages = [page.extract_text() or "" for page in reader.pages[:PDF_MAX_PAGES]]
    except UnsupportedFile:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as error:
        logger.info("a PDF could not be read: %s", type(error).__name__)
        raise UnsupportedFile("is a PDF that cannot be read") from None
    return "\n\n".join(page.strip() for page in pages if page.strip())


def turn_file(*, embed_id: str, name: str, mime: str, data_b64: str) -> TurnFile:
    """One attachment (its base64 already checked by ``pipeline.protocol``) as a
    :class:`TurnFile`. Blocking (PDF text): call it off the event loop.

    Raises:
        UnsupportedFile: see :func:`file_kind`, :func:`decode_text`, :func:`pdf_text`.
    """
    data = base64.b64decode(data_b64)
    kind = file_kind(mime=mime, name=name, head=data[:16])
    if kind is None:
        raise UnsupportedFile("is not an image or a text-like file this assistant reads")
    if kind == "image":
        return TurnFile(embed_id=embed_id, name=name, mime=mime.lower(), kind="image", data=data)
    text = pdf_text(data) if kind == "pdf" else decode_text(data)
    return TurnFile(embed_id=embed_id, name=name, mime=mime.lower(), kind="text", text=text)


def _label(name: str) -> str:
    return _NAME_UNSAFE_RE.sub("_", name).strip() or "file"


def earlier_file(*, embed_id: str, name: str, mime: str, data_b64: str | None) -> TurnFile | str:
    """A file of an earlier message that a client sends again with its history
    (``chat.history``, docs/protocol.md §13), read as :func:`turn_file` reads it at
    send time. Without ``data_b64``: an image (histories name images only, as the AI
    cache does) is a :class:`TurnFile` without bytes; any other file is the note
    :data:`LEFT_OUT` (the client had no room for it in the frame). A file that does not
    read is a note saying why, not an error: the message was accepted with it. Blocking
    (PDF text): call it off the event loop."""
    if data_b64 is None:
        if mime.lower() in IMAGE_TYPES:
            return TurnFile(embed_id=embed_id, name=name, mime=mime.lower(), kind="image")
        return LEFT_OUT.format(name=_label(name))
    try:
        return turn_file(embed_id=embed_id, name=name, mime=mime, data_b64=data_b64)
    except UnsupportedFile as bad:
        return f"[file: {_label(name)} ({bad})]"


def earlier_message_text(text: str, files: Sequence[TurnFile | str], *, budget_tokens: int) -> str:
    """An earlier user message with its files (:func:`earlier_file`) as the AI cache
    keeps it: :func:`history_text` (the text files' blocks cut to ``budget_tokens``
    together, ``[image: name]`` per image), then the notes of files left out."""
    read = [f for f in files if isinstance(f, TurnFile)]
    notes = [f for f in files if isinstance(f, str)]
    return "\n\n".join([history_text(text, read, budget_tokens=budget_tokens), *notes])


def files_budget_tokens(*, context_tokens: int, reserve_tokens: int) -> int:
    """Estimated tokens the files' text may take in a call to a ``context_tokens``
    model that keeps ``reserve_tokens`` for the answer (at least 64)."""
    return max(64, int((context_tokens - reserve_tokens) * FILES_CONTEXT_SHARE))


def _text_blocks(files: Sequence[TurnFile], budget_tokens: int) -> list[str]:
    """The text files as ``<file name=… type=…>`` blocks sharing ``budget_tokens``
    fairly; a cut one ends with ``pipeline.prompts.TRUNCATION_MARKER`` ("[truncated: N
    of M characters shown]")."""
    texts = [f for f in files if f.kind == "text"]
    shares = fair_shares([estimate_tokens(f.text) for f in texts], budget_tokens)
    blocks = []
    for file, share in zip(texts, shares, strict=True):
        body = text_truncate(file.text, share) if file.text.strip() else NO_TEXT
        header = f'<file name="{_label(file.name)}" type="{_label(file.mime)}">'
        blocks.append(f"{header}\n{body}\n</file>")
    return blocks


def history_text(text: str, files: Sequence[TurnFile], *, budget_tokens: int) -> str:
    """The message as the AI cache keeps it: ``text``, then each text file's block (cut
    to ``budget_tokens`` together), then ``[image: name]`` per image."""
    if not files:
        return text
    parts = [text, *_text_blocks(files, budget_tokens)]
    parts += [f"[image: {_label(f.name)}]" for f in files if f.kind == "image"]
    return "\n\n".join(parts)


def user_content(
    text: str, files: Sequence[TurnFile], *, vision: bool, budget_tokens: int
) -> str | list[dict[str, Any]]:
    """The user message's ``content`` for the model: :func:`history_text` as a string,
    or, when ``vision`` and an image is attached, a text part followed by one
    ``image_url`` part (a ``data:`` URL of the image) per image. Without vision each
    image is a note that the model cannot see it."""
    images = [f for f in files if f.kind == "image"]
    if not images or not vision:
        plain = [f for f in files if f.kind == "text"]
        body = history_text(text, plain, budget_tokens=budget_tokens)
        notes = [
            f"[image: {_label(f.name)} (attached, but this model cannot see images)]"
            for f in images
        ]
        return "\n\n".join([body, *notes])
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": history_text(text, files, budget_tokens=budget_tokens)}
    ]
    for image in images:
        url = f"data:{image.mime};base64,{base64.b64encode(image.data).decode('ascii')}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def blind_messages(
    question: dict[str, Any], content: str
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """For a model that does not see images (``openmates.llm.stream``'s
    ``without_vision``, used per fallback entry): a function giving the call's messages
    with ``question``, the turn's user message (the same dict object the messages
    hold), carrying ``content`` (:func:`user_content` without vision) in place of its
    image parts."""

    def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**m, "content": content} if m is question else m for m in messages]

    return without_images


def estimate_content_tokens(content: str | list[dict[str, Any]]) -> int:
    """Estimated tokens of a user message's ``content`` (:func:`user_content`): its text,
    and :data:`IMAGE_TOKENS` per image part."""
    if isinstance(content, str):
        return estimate_tokens(content)
    total = 0
    for part in content:
        if part.get("type") == "image_url":
            total += IMAGE_TOKENS
        else:
            total += estimate_tokens(str(part.get("text", "")))
    return total
