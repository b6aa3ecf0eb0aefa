"""Counting the Redis round trips of a piece of code (real Redis, nothing faked)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

from redis.asyncio.connection import AbstractConnection


@contextlib.contextmanager
def round_trips() -> Iterator[list[int]]:
    """``with round_trips() as count:`` — ``count[0]`` requests written to Redis meanwhile
    (a pipeline or a script is one); each is still sent to Redis as usual."""
    count = [0]
    send = AbstractConnection.send_packed_command

    async def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        count[0] += 1
        await send(self, command, check_health)

    with mock.patch.object(AbstractConnection, "send_packed_command", counting):
        yield count
