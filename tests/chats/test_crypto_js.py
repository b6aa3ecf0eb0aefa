"""static/js/crypto.js in headless Chromium: keys, wrapping, the field envelope."""

from __future__ import annotations

import base64
from typing import Any

import pytest

pytestmark = pytest.mark.browser

PASSPHRASE = "a long and private passphrase"
LOGIN_PASSWORD = "correct horse battery staple"

SETUP = """
const made = await c.keyring.createUserKeys({userId: args.userId, passphrase: args.passphrase,
  loginPassword: args.login});
return made;
"""


def _setup(page: Any, user_id: str = "7") -> dict[str, Any]:
    made = page.run(SETUP, {"userId": user_id, "passphrase": PASSPHRASE, "login": LOGIN_PASSWORD})
    assert "error" not in made
    return made


ENCRYPT = """
const k = c.keyring;
const chatKey = await k.createChatKey(args.chatId);
const ct = await k.encryptField({chatId: args.chatId, objectId: args.objectId, field: args.field,
  role: args.role, version: args.version, plaintext: args.text});
return {chatKey, ct};
"""

DECRYPT_FRESH = """
const k = c.createKeyring();
await k.unlock({userId: args.userId, userKeys: args.userKeys, passphrase: args.passphrase});
await k.loadChatKey(args.chatId, args.chatKey);
return {text: await k.decryptField({chatId: args.chatId, objectId: args.objectId,
  field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};
"""


def _field(**overrides: Any) -> dict[str, Any]:
    base = {
        "chatId": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "objectId": "0190a1b2-c3d4-7e5f-8a9b-000000000001",
        "field": "content",
        "role": "user",
        "version": 1,
        "text": "hello, ünïcode ✓",
    }
    base.update(overrides)
    return base


def test_envelope_has_the_crypto_md_layout(crypto_page: Any) -> None:
    _setup(crypto_page)
    out = crypto_page.run(ENCRYPT, _field())
    raw = base64.b64decode(out["ct"])
    assert raw[0] == 0x01
    assert len(raw) == 1 + 8 + 12 + len(_field()["text"].encode()) + 16
    wrapped = base64.b64decode(out["chatKey"])
    assert wrapped[0] == 0x01
    assert len(wrapped) == 1 + 8 + 12 + 32 + 16


def test_another_device_decrypts_with_the_passphrase(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    result = crypto_page.run(
        DECRYPT_FRESH,
        {**args, **out, "userId": "7", "userKeys": made["userKeys"], "passphrase": PASSPHRASE},
    )
    assert result == {"text": args["text"]}


def test_wrong_passphrase_is_rejected(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    result = crypto_page.run(
        "const k = c.createKeyring();"
        "await k.unlock({userId: '7', userKeys: args.userKeys, passphrase: 'not the passphrase'});"
        "return {unlocked: k.isUnlocked()};",
        {"userKeys": made["userKeys"]},
    )
    assert result == {"error": "wrong_passphrase"}


def test_kdf_parameters_below_the_floor_are_refused(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    weakened = {**made["userKeys"], "kdf": {**made["userKeys"]["kdf"], "iterations": 100_000}}
    short_salt = {
        **made["userKeys"],
        "kdf": {**made["userKeys"]["kdf"], "salt": base64.b64encode(b"8 bytes!").decode()},
    }
    other_hash = {**made["userKeys"], "kdf": {**made["userKeys"]["kdf"], "hash": "SHA-1"}}
    for keys in (weakened, short_salt, other_hash):
        result = crypto_page.run(
            "const k = c.createKeyring();"
            "await k.unlock({userId: '7', userKeys: args.userKeys, passphrase: args.p});"
            "return {unlocked: true};",
            {"userKeys": keys, "p": PASSPHRASE},
        )
        assert result == {"error": "kdf_below_floor"}
    creating = crypto_page.run(
        "await c.createKeyring().createUserKeys({userId: '8', passphrase: args.p,"
        " iterations: 599999}); return {};",
        {"p": PASSPHRASE},
    )
    assert creating == {"error": "kdf_below_floor"}


def test_passphrase_equal_to_login_password_is_refused(crypto_page: Any) -> None:
    result = crypto_page.run(
        "await c.createKeyring().createUserKeys({userId: '9', passphrase: args.p,"
        " loginPassword: args.p}); return {};",
        {"p": LOGIN_PASSWORD},
    )
    assert result == {"error": "passphrase_is_login_password"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"objectId": "0190a1b2-c3d4-7e5f-8a9b-000000000002"}, "decryption_failed"),
        ({"field": "title"}, "decryption_failed"),
        ({"role": "assistant"}, "decryption_failed"),
        ({"version": 2}, "decryption_failed"),
        ({"chatId": "0190a1b2-c3d4-7e5f-8a9b-ffffffffffff"}, "wrong_key"),
    ],
)
def test_ciphertext_moved_elsewhere_fails(
    crypto_page: Any, change: dict[str, Any], expected: str
) -> None:
    made = _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    moved = {**args, **out, **change}
    result = crypto_page.run(
        "const k = c.createKeyring();"
        "await k.unlock({userId: '7', userKeys: args.userKeys, passphrase: args.passphrase});"
        "await k.loadChatKey(args.origChat, args.chatKey);"
        "if (args.chatId !== args.origChat) await k.loadChatKey(args.chatId,"
        "  await k.createChatKey(args.chatId));"
        "return {text: await k.decryptField({chatId: args.chatId, objectId: args.objectId,"
        "  field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};",
        {
            **moved,
            "origChat": args["chatId"],
            "userKeys": made["userKeys"],
            "passphrase": PASSPHRASE,
        },
    )
    assert result == {"error": expected}


def test_tampered_ciphertext_is_rejected(crypto_page: Any) -> None:
    _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    raw = bytearray(base64.b64decode(out["ct"]))
    raw[-20] ^= 0x01
    tampered = base64.b64encode(bytes(raw)).decode()
    result = crypto_page.run(
        "return {text: await c.keyring.decryptField({chatId: args.chatId, objectId: args.objectId,"
        " field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};",
        {**args, "ct": tampered},
    )
    assert result == {"error": "decryption_failed"}


def _decrypt(crypto_page: Any, args: dict[str, Any], version: int, ciphertext: str) -> Any:
    return crypto_page.run(
        "return {text: await c.keyring.decryptField({chatId: args.chatId, objectId: args.objectId,"
        " field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};",
        {**args, "version": version, "ct": ciphertext},
    )


def test_a_version_lower_than_one_read_is_refused(crypto_page: Any) -> None:
    _setup(crypto_page)
    v1 = _field(version=1)
    out1 = crypto_page.run(ENCRYPT, v1)
    out2 = crypto_page.run(
        "return {ct: await c.keyring.encryptField({chatId: args.chatId, objectId: args.objectId,"
        " field: args.field, role: args.role, version: 2, plaintext: 'newer'})};",
        v1,
    )
    # Encrypting version 2 is only a proposal (the server may refuse it with a conflict):
    # version 1, what the server then still holds, stays readable.
    assert _decrypt(crypto_page, v1, 1, out1["ct"]) == {"text": v1["text"]}
    assert _decrypt(crypto_page, v1, 2, out2["ct"]) == {"text": "newer"}
    # Once version 2 has been read, a server passing off version 1 again is refused, for
    # reading and for writing.
    assert _decrypt(crypto_page, v1, 1, out1["ct"]) == {"error": "stale_version"}
    rewrite = crypto_page.run(
        "return {ct: await c.keyring.encryptField({chatId: args.chatId, objectId: args.objectId,"
        " field: args.field, role: args.role, version: 1, plaintext: 'older'})};",
        v1,
    )
    assert rewrite == {"error": "stale_version"}


def test_passphrase_change_keeps_old_chats_readable(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    changed = crypto_page.run(
        "return await c.keyring.changePassphrase({userId: '7', userKeys: args.userKeys,"
        " oldPassphrase: args.old, newPassphrase: args.new, loginPassword: args.login});",
        {
            "userKeys": made["userKeys"],
            "old": PASSPHRASE,
            "new": "an entirely new passphrase",
            "login": LOGIN_PASSWORD,
        },
    )
    assert changed["master_key_id"] == made["userKeys"]["master_key_id"]
    assert changed["wrapped_master_key"] != made["userKeys"]["wrapped_master_key"]
    assert changed["recovery_wrapped_master_key"] == made["userKeys"]["recovery_wrapped_master_key"]
    common = {**args, **out, "userId": "7", "userKeys": changed}
    assert crypto_page.run(
        DECRYPT_FRESH, {**common, "passphrase": "an entirely new passphrase"}
    ) == {"text": args["text"]}
    assert crypto_page.run(DECRYPT_FRESH, {**common, "passphrase": PASSPHRASE}) == {
        "error": "wrong_passphrase"
    }


def test_recovery_key_unlocks(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    recovery = made["recoveryKey"]
    assert len(recovery.replace("-", "")) == 55
    result = crypto_page.run(
        "const k = c.createKeyring();"
        "await k.unlockWithRecoveryKey({userId: '7', userKeys: args.userKeys,"
        "  recoveryKey: args.recovery.toLowerCase()});"
        "await k.loadChatKey(args.chatId, args.chatKey);"
        "return {text: await k.decryptField({chatId: args.chatId, objectId: args.objectId,"
        "  field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};",
        {**args, **out, "userKeys": made["userKeys"], "recovery": recovery},
    )
    assert result == {"text": args["text"]}
    for position in (0, 20, len(recovery) - 1):
        swapped = "A" if recovery[position] != "A" else "B"
        typo = recovery[:position] + swapped + recovery[position + 1 :]
        mistyped = crypto_page.run(
            "await c.createKeyring().unlockWithRecoveryKey({userId: '7', userKeys: args.userKeys,"
            " recoveryKey: args.recovery}); return {};",
            {"userKeys": made["userKeys"], "recovery": typo},
        )
        assert mistyped == {"error": "bad_recovery_key"}


def test_recovery_replaces_the_recovery_key_it_used(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    args = _field()
    out = crypto_page.run(ENCRYPT, args)
    recovered = crypto_page.run(
        "return await c.keyring.recover({userId: '7', userKeys: args.userKeys,"
        " recoveryKey: args.recovery, newPassphrase: args.new, loginPassword: args.login});",
        {
            "userKeys": made["userKeys"],
            "recovery": made["recoveryKey"],
            "new": "an entirely new passphrase",
            "login": LOGIN_PASSWORD,
        },
    )
    keys = recovered["userKeys"]
    assert recovered["recoveryKey"] != made["recoveryKey"]
    assert len(recovered["recoveryKey"].replace("-", "")) == 55
    assert keys["master_key_id"] == made["userKeys"]["master_key_id"]
    assert keys["recovery_key_id"] != made["userKeys"]["recovery_key_id"]
    unlock_with = (
        "const k = c.createKeyring();"
        "await k.unlockWithRecoveryKey({userId: '7', userKeys: args.userKeys,"
        "  recoveryKey: args.recovery});"
        "await k.loadChatKey(args.chatId, args.chatKey);"
        "return {text: await k.decryptField({chatId: args.chatId, objectId: args.objectId,"
        "  field: args.field, role: args.role, version: args.version, ciphertext: args.ct})};"
    )
    common = {**args, **out, "userKeys": keys}
    assert crypto_page.run(unlock_with, {**common, "recovery": recovered["recoveryKey"]}) == {
        "text": args["text"]
    }
    assert crypto_page.run(unlock_with, {**common, "recovery": made["recoveryKey"]}) == {
        "error": "bad_recovery_key"
    }
    assert crypto_page.run(
        DECRYPT_FRESH, {**common, "userId": "7", "passphrase": "an entirely new passphrase"}
    ) == {"text": args["text"]}


def test_embed_keys_are_derived_the_same_on_every_device(crypto_page: Any) -> None:
    made = _setup(crypto_page)
    args = _field(objectId="0190a1b2-c3d4-7e5f-8a9b-00000000e0e0", field="embed", role="-")
    out = crypto_page.run(ENCRYPT, args)
    result = crypto_page.run(
        DECRYPT_FRESH,
        {**args, **out, "userId": "7", "userKeys": made["userKeys"], "passphrase": PASSPHRASE},
    )
    assert result == {"text": args["text"]}


def test_keys_are_not_extractable_nor_on_window(crypto_page: Any) -> None:
    _setup(crypto_page)
    crypto_page.run(ENCRYPT, _field())
    exposed = crypto_page.run(
        "const names = Object.getOwnPropertyNames(window).filter((n) => {"
        "  try { return window[n] instanceof CryptoKey; } catch (e) { return false; } });"
        "return {names, keyringKeys: Object.keys(c.keyring)};"
    )
    assert exposed["names"] == []
    assert "masterKey" not in exposed["keyringKeys"]
    assert "encryptField" in exposed["keyringKeys"]
