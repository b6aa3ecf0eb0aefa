"""What an attached file is, from its type, name and first bytes (docs/protocol.md §13).

Pure (no Django): ``pipeline.protocol`` checks a frame's files with :func:`file_kind`,
``pipeline.files`` reads them.
"""

from __future__ import annotations

from typing import Literal

FileKind = Literal["image", "text", "pdf"]

IMAGE_TYPES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
# Text-like types beyond ``text/*``, and file name endings taken as text whatever type
# the browser reported (it reports none, or application/octet-stream, for many).
TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/x-tex",
        "application/csv",
    }
)
TEXT_SUFFIXES = frozenset(
    [
        "txt",
        "md",
        "markdown",
        "rst",
        "csv",
        "tsv",
        "json",
        "jsonl",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "xml",
        "html",
        "htm",
        "css",
        "js",
        "mjs",
        "ts",
        "tsx",
        "jsx",
        "py",
        "rb",
        "go",
        "rs",
        "java",
        "kt",
        "c",
        "h",
        "cc",
        "cpp",
        "hpp",
        "cs",
        "php",
        "sh",
        "bash",
        "zsh",
        "sql",
        "r",
        "swift",
        "scala",
        "lua",
        "pl",
        "tex",
        "log",
        "env",
        "dockerfile",
        "makefile",
    ]
)
PDF_TYPE = "application/pdf"


def _suffix(name: str) -> str:
    base = name.rsplit("/", 1)[-1].lower()
    return base.rsplit(".", 1)[-1] if "." in base else base


def file_kind(*, mime: str, name: str, head: bytes) -> FileKind | None:
    """What a file is, from its reported type, its name and its first bytes: ``"image"``
    (a PNG, JPEG, GIF or WebP whose bytes start as one), ``"pdf"``, ``"text"``, or None
    for anything else. Text is not checked here (:func:`decode_text` does)."""
    mime = mime.lower().split(";", 1)[0].strip()
    if mime in IMAGE_TYPES:
        signatures = IMAGE_TYPES[mime]
        if not head.startswith(signatures):
            return None
        if mime == "image/webp" and head[8:12] != b"WEBP":
            return None
        return "image"
    if mime == PDF_TYPE or (not mime.startswith("text/") and _suffix(name) == "pdf"):
        return "pdf" if head.startswith(b"%PDF-") else None
    if mime.startswith("image/"):
        return None
    if mime.startswith("text/") or mime in TEXT_TYPES or _suffix(name) in TEXT_SUFFIXES:
        return "text"
    return None
