"""docs/crypto.md §2-§3 byte for byte: keys and ciphertext made in Python open in the browser.

A non-browser client that follows docs/crypto.md (and the layout documented at the top of
static/js/crypto.js) must interoperate with the browser module. This test builds user
keys, a wrapped chat key, fields and an embed with ``cryptography`` only, then has the
browser unlock and decrypt them.
"""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

pytestmark = pytest.mark.browser

USER_ID = "31"
CHAT_ID = "0190f0f0-0000-7000-8000-00000000c0de"
MESSAGE_ID = "0190f0f0-0000-7000-8000-0000000000a1"
EMBED_ID = "0190f0f0-0000-7000-8000-0000000000e1"
PASSPHRASE = "interoperable passphrase"
ITERATIONS = 600_000


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _envelope(key: bytes, key_id: bytes, plaintext: bytes, ad: str) -> bytes:
    iv = os.urandom(12)
    return b"\x01" + key_id + iv + AESGCM(key).encrypt(iv, plaintext, ad.encode())


def _python_client() -> dict[str, Any]:
    salt, kdf_key_id = os.urandom(16), os.urandom(8)
    pass_key = PBKDF2HMAC(hashes.SHA256(), 32, salt, ITERATIONS).derive(PASSPHRASE.encode())
    master, master_key_id = os.urandom(32), os.urandom(8)
    recovery, recovery_key_id = os.urandom(32), os.urandom(8)
    wrapped_chat = _envelope(master, master_key_id, chat_key := os.urandom(32),
                             f"om1|wrap|{USER_ID}|{CHAT_ID}")  # fmt: skip
    chat_key_id = hashlib.sha256(wrapped_chat).digest()[:8]
    embed_key = HKDF(hashes.SHA256(), 32, b"om1-embed", EMBED_ID.encode()).derive(chat_key)
    embed_key_id = hashlib.sha256(chat_key_id + EMBED_ID.encode()).digest()[:8]
    field_ad = f"om1|{USER_ID}|{CHAT_ID}|{{}}|{{}}|{{}}|{{}}"
    return {
        "userKeys": {
            "wrapped_master_key": _b64(
                _envelope(pass_key, kdf_key_id, master, f"om1|wrap|{USER_ID}|master|passphrase")
            ),
            "recovery_wrapped_master_key": _b64(
                _envelope(recovery, recovery_key_id, master, f"om1|wrap|{USER_ID}|master|recovery")
            ),
            "master_key_id": _b64(master_key_id),
            "recovery_key_id": _b64(recovery_key_id),
            "kdf": {
                "name": "PBKDF2",
                "hash": "SHA-256",
                "iterations": ITERATIONS,
                "salt": _b64(salt),
                "key_id": _b64(kdf_key_id),
            },
        },
        "chatKey": _b64(wrapped_chat),
        "title": _b64(
            _envelope(
                chat_key, chat_key_id, b"Trip plans",
                field_ad.format(CHAT_ID, "title", "-", 4),
            )
        ),
        "content": _b64(
            _envelope(
                chat_key, chat_key_id, "Größe: 42 ✓".encode(),
                field_ad.format(MESSAGE_ID, "content", "assistant", 2),
            )
        ),
        "embed": _b64(
            _envelope(
                embed_key, embed_key_id, b'{"result": 7}',
                field_ad.format(EMBED_ID, "embed", "-", 1),
            )
        ),
    }  # fmt: skip


def test_python_made_keys_and_fields_open_in_the_browser(crypto_page: Any) -> None:
    made = _python_client()
    result = crypto_page.run(
        "const k = c.createKeyring();"
        "await k.unlock({userId: args.userId, userKeys: args.userKeys, passphrase: args.p});"
        "await k.loadChatKey(args.chatId, args.chatKey);"
        "const d = (objectId, field, role, version, ciphertext) => k.decryptField("
        "  {chatId: args.chatId, objectId, field, role, version, ciphertext});"
        "return {title: await d(args.chatId, 'title', '-', 4, args.title),"
        "  content: await d(args.messageId, 'content', 'assistant', 2, args.content),"
        "  embed: await d(args.embedId, 'embed', '-', 1, args.embed)};",
        {
            **made,
            "userId": USER_ID,
            "p": PASSPHRASE,
            "chatId": CHAT_ID,
            "messageId": MESSAGE_ID,
            "embedId": EMBED_ID,
        },
    )
    assert result == {"title": "Trip plans", "content": "Größe: 42 ✓", "embed": '{"result": 7}'}
