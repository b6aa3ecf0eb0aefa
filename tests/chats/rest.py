"""Helpers of the REST tests: a client envelope and a signed-in API client."""

from __future__ import annotations

import base64
import os
from typing import Any

from rest_framework.test import APIClient

# The login password of tests.factories.UserFactory's users (PUT /api/chats/keys/ asks it).
PASSWORD = "correct horse battery staple"
# A user's wrapped keys as the browser sends them (docs/crypto.md §2), without and with
# the login password that PUT /api/chats/keys/ checks again.
KDF: dict[str, Any] = {
    "name": "PBKDF2",
    "hash": "SHA-256",
    "iterations": 600000,
    "salt": "MDEyMzQ1Njc4OWFiY2RlZg==",
}
USER_KEYS: dict[str, Any] = {
    "wrapped_master_key": "AQID",
    "recovery_wrapped_master_key": "BAUG",
    "master_key_id": "AAAAAAAAAAA=",
    "recovery_key_id": "AQEBAQEBAQE=",
    "kdf": KDF,
}
PUT_KEYS: dict[str, Any] = {**USER_KEYS, "password": PASSWORD}


def client_envelope(body: bytes = b"ciphertext and tag") -> str:
    """Standard base64 of a docs/crypto.md §3 envelope (version 1, key id, iv, body >= tag)."""
    return base64.b64encode(b"\x01" + os.urandom(8) + os.urandom(12) + body.ljust(16)).decode()


def signed_in_client(user: Any) -> APIClient:
    """An ``APIClient`` with ``user``'s session."""
    client = APIClient()
    client.force_login(user)
    return client
