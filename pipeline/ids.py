"""UUIDv7 ids for what the server creates (tasks, assistant messages, embeds; docs/crypto.md §1)."""

from __future__ import annotations

import os
import time
import uuid


def new_id() -> str:
    """A fresh UUIDv7 as a lowercase string (RFC 9562: 48-bit Unix ms, version, random)."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return str(uuid.UUID(int=value))
