"""Shared checks of client-supplied ids and ciphertext (docs/crypto.md §1 and §3).

One definition for every interface (the WebSocket protocol and the REST API) so the two
accept exactly the same values. Pure functions, no Django or pydantic.
"""

from __future__ import annotations

import base64
import binascii
import re

# docs/crypto.md §1: lowercase UUIDv7 text (version nibble 7, RFC 9562 variant 10xx).
UUID7_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ENVELOPE_VERSION = 0x01
# Smallest docs/crypto.md §3 envelope: version byte, 8-byte key id, 12-byte iv, 16-byte GCM tag.
MIN_ENVELOPE_BYTES = 1 + 8 + 12 + 16


# The longest reply the server produces, and so the longest plaintext a client stores or
# sends back as history (WebSocket and REST alike).
MAX_REPLY_BYTES = 512 * 1024


def ciphertext_chars(plaintext_bytes: int) -> int:
    """Length in characters of the base64 docs/crypto.md §3 envelope of ``plaintext_bytes``."""
    return 4 * -(-(plaintext_bytes + MIN_ENVELOPE_BYTES) // 3)


# The longest ``encrypted_content`` a client stores (a message of MAX_REPLY_BYTES).
MAX_MESSAGE_CIPHERTEXT_CHARS = ciphertext_chars(MAX_REPLY_BYTES)

# Files attached to a message (docs/protocol.md §13): the ceilings of the settings
# ``PIPELINE_MAX_FILE_BYTES`` (one file) and ``PIPELINE_MAX_FILES_BYTES`` (a message's
# files together), so that a message.send with its files' base64 fits one 4 MiB frame.
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES_BYTES = 2560 * 1024
# The tool name of a file's embed, and the longest envelope of one: the JSON
# ``{"kind", "name", "mime", "size", "data"}`` with the file's base64 and room for the
# rest (docs/crypto.md §3).
FILE_EMBED_TOOL = "file"
FILE_EMBED_CIPHERTEXT_CHARS = ciphertext_chars(4 * -(-MAX_FILE_BYTES // 3) + 4096)


def is_uuid7(value: object) -> bool:
    """Whether ``value`` is a lowercase UUIDv7 string (``xxxxxxxx-xxxx-7xxx-[89ab]xxx-...``)."""
    return isinstance(value, str) and UUID7_RE.match(value) is not None


def envelope_problem(value: object) -> str | None:
    """Why ``value`` is not a docs/crypto.md §3 envelope in standard base64, or None if it is.

    An envelope decodes to at least :data:`MIN_ENVELOPE_BYTES` bytes starting with
    :data:`ENVELOPE_VERSION`. Returns ``"must be standard base64"`` or ``"must be a
    docs/crypto.md §3 envelope (version 1)"``.
    """
    if not isinstance(value, str):
        return "must be standard base64"
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "must be standard base64"
    if len(raw) < MIN_ENVELOPE_BYTES or raw[0] != ENVELOPE_VERSION:
        return "must be a docs/crypto.md §3 envelope (version 1)"
    return None
