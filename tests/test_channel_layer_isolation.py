"""A frame one test leaves in the channel layer never reaches a later test.

See tests/channel_layer.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from cryptography.fernet import InvalidToken

from openmates.redis_client import sync_client
from tests.channel_layer import fresh_channel_layer, inbox_keys

STALE_S = 200  # older than the layer's Fernet TTL (expiry 60 s + 10 s)


def _plant_stale_frame(layer: Any, channel: str) -> None:
    # As channels-redis leaves a frame whose backup clean-up was cancelled: in $inflight.
    body = layer._serializer.as_bytes({"type": "stale", "__asgi_channel__": channel})
    token = layer._serializer.crypter.encrypt_at_time(body, int(time.time()) - STALE_S)
    _, backup = inbox_keys(layer)
    sync_client().zadd(backup, {b"\0" * 12 + token: time.time() - STALE_S})


def test_a_stale_frame_poisons_its_layer_but_not_the_next_tests_layer() -> None:
    with fresh_channel_layer():
        old = get_channel_layer()
        assert old is not None
        old_channel = async_to_sync(old.new_channel)()
        _plant_stale_frame(old, old_channel)
        async_to_sync(old.send)(old_channel, {"type": "fresh"})
        with pytest.raises(InvalidToken):
            async_to_sync(old.receive)(old_channel)

    assert sync_client().exists(*inbox_keys(old)) == 0
    layer = get_channel_layer()
    assert layer is not None
    assert layer is not old
    assert layer.client_prefix != old.client_prefix
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.send)(channel, {"type": "fresh", "n": 1})
    assert async_to_sync(layer.receive)(channel) == {"type": "fresh", "n": 1}
