"""A channel layer of its own for each test of the test process.

channels-redis delivers every ``new_channel()`` of one layer object through a single
process inbox, the sorted set ``<prefix>specific.<client_prefix>!``, plus its
``$inflight`` backup (which has no expiry). The layer object, and so its inbox, would
otherwise live for the whole session: a frame an earlier test left unread, or one whose
backup clean-up task ``async_to_sync`` cancelled when its loop ended, is re-queued by
the next ``receive()`` of a later test. Older than the layer's expiry + 10 s it fails
Fernet's TTL check (``cryptography.fernet.InvalidToken``); younger, the later test
reads another test's frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from channels.layers import channel_layers

from openmates.redis_client import sync_client

ALIAS = "default"


def inbox_keys(layer: Any) -> tuple[str, str]:
    """``(inbox, backup)``: the Redis keys of ``layer``'s process inbox (channels-redis 4)."""
    inbox = f"{layer.prefix}specific.{layer.client_prefix}!"
    return inbox, f"{inbox}$inflight"


@contextmanager
def fresh_channel_layer() -> Iterator[None]:
    """Give ``get_channel_layer()`` a new layer object (a new, empty process inbox).

    On exit the layer built in the block is dropped and its inbox keys are deleted, so
    nothing it left unread reaches a later block. Live Daphne servers are separate
    processes with inboxes of their own and are not touched.
    """
    channel_layers.backends.pop(ALIAS, None)
    try:
        yield
    finally:
        layer = channel_layers.backends.pop(ALIAS, None)
        if hasattr(layer, "client_prefix"):  # a channels-redis layer, not an in-memory one
            sync_client().delete(*inbox_keys(layer))
