"""The Vault seam against a real OpenBao: transit, data keys, key management, failures."""

from __future__ import annotations

import json
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import override_settings

from openmates import crypto, vault
from openmates.runlocal.openbao import EmbeddedOpenBao


def test_key_names_follow_the_contract() -> None:
    assert vault.user_key_name(42) == "user-42"
    assert vault.instance_key_name("7") == "instance-7"


def test_transit_round_trip(transit_key: str) -> None:
    (ciphertext,) = vault.encrypt(transit_key, [b"hello vault"])
    assert ciphertext.startswith("vault:v1:")
    assert b"hello" not in ciphertext.encode()
    assert vault.decrypt(transit_key, [ciphertext]) == [b"hello vault"]


def test_batch_of_100_values_is_one_vault_call(transit_key: str) -> None:
    values = [f"value {i}".encode() for i in range(100)]
    before = vault.call_count()
    ciphertexts = vault.encrypt(transit_key, values)
    after_encrypt = vault.call_count()
    plaintexts = vault.decrypt(transit_key, ciphertexts)
    assert after_encrypt - before == 1
    assert vault.call_count() - after_encrypt == 1
    assert plaintexts == values
    assert len(set(ciphertexts)) == 100


def test_empty_batch_makes_no_vault_call(transit_key: str) -> None:
    before = vault.call_count()
    assert vault.encrypt(transit_key, []) == []
    assert vault.decrypt(transit_key, []) == []
    assert vault.call_count() == before


def test_context_separates_derived_keys(transit_key: str) -> None:
    (ciphertext,) = vault.encrypt(transit_key, [b"x"], context=b"purpose-a")
    with pytest.raises(vault.VaultError) as caught:
        vault.decrypt(transit_key, [ciphertext], context=b"purpose-b")
    assert caught.value.reason == "invalid_request"
    assert vault.decrypt(transit_key, [ciphertext], context=b"purpose-a") == [b"x"]


def test_rotated_key_still_decrypts_old_ciphertext(transit_key: str) -> None:
    (old,) = vault.encrypt(transit_key, [b"before rotation"])
    assert vault.rotate_key(transit_key) == 2
    assert vault.key_latest_version(transit_key) == 2
    (new,) = vault.encrypt(transit_key, [b"after rotation"])
    assert old.startswith("vault:v1:")
    assert new.startswith("vault:v2:")
    assert vault.decrypt(transit_key, [old, new]) == [b"before rotation", b"after rotation"]
    (rewrapped,) = vault.rewrap(transit_key, [old])
    assert rewrapped.startswith("vault:v2:")
    assert vault.decrypt(transit_key, [rewrapped]) == [b"before rotation"]


def test_deleted_user_key_no_longer_decrypts_while_another_still_does(
    transit_key: str, other_transit_key: str
) -> None:
    (mine,) = vault.encrypt(transit_key, [b"shred me"])
    (theirs,) = vault.encrypt(other_transit_key, [b"keep me"])
    vault.delete_key(transit_key)
    with pytest.raises(vault.VaultError) as caught:
        vault.decrypt(transit_key, [mine])
    assert caught.value.reason == "not_found"
    assert vault.decrypt(other_transit_key, [theirs]) == [b"keep me"]


def test_deleting_a_missing_key_is_fine_and_creates_nothing() -> None:
    name = f"user-missing-{uuid.uuid4().hex[:8]}"
    before = vault.call_count()
    vault.delete_key(name)
    # One request: the refused config update says the key is missing, so no delete follows.
    assert vault.call_count() - before == 1
    with pytest.raises(vault.VaultError) as reading:
        vault.key_latest_version(name)
    assert reading.value.reason == "not_found"


def test_ensure_key_is_idempotent(transit_key: str) -> None:
    (ciphertext,) = vault.encrypt(transit_key, [b"still here"])
    vault.ensure_key(transit_key)
    assert vault.key_latest_version(transit_key) == 1
    assert vault.decrypt(transit_key, [ciphertext]) == [b"still here"]


def _app_request(method: str, path: str, body: dict[str, Any] | None = None) -> int:
    """The status of a raw transit request made with the app token."""
    response = httpx.request(
        method,
        f"{settings.VAULT_ADDR}/v1/transit/{path}",
        headers={"X-Vault-Token": settings.VAULT_TOKEN},
        json=body,
        timeout=10,
    )
    return response.status_code


def test_the_web_process_runs_the_key_lifecycle_without_the_admin_token() -> None:
    name = f"user-t{uuid.uuid4().hex[:12]}"
    with override_settings(VAULT_ADMIN_TOKEN="", VAULT_ADMIN_TOKEN_FILE=""):
        vault.ensure_key(name)
        vault.ensure_key(name)
        assert vault.key_latest_version(name) == 1
        (ciphertext,) = vault.encrypt(name, [b"shred me"])
        with pytest.raises(vault.VaultError) as rotating:
            vault.rotate_key(name)
        assert rotating.value.reason == "permission_denied"
        vault.delete_key(name)
        with pytest.raises(vault.VaultError) as reading:
            vault.decrypt(name, [ciphertext])
    assert reading.value.reason == "not_found"


def test_app_token_may_not_weaken_or_reshape_a_key(transit_key: str) -> None:
    (ciphertext,) = vault.encrypt(transit_key, [b"the key survived"])
    denied: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", f"keys/{transit_key}/rotate", {}),
        ("POST", f"keys/{transit_key}/config", {"min_decryption_version": 2}),
        ("POST", f"keys/{transit_key}/config", {"exportable": True}),
        ("POST", f"keys/{transit_key}/config", {"deletion_allowed": False}),
        ("POST", f"keys/{transit_key}/trim", {"min_available_version": 1}),
        ("POST", "keys/user-exportable", {"type": "aes256-gcm96", "exportable": True}),
        ("POST", "keys/user-rsa", {"type": "rsa-2048"}),
        ("GET", f"export/encryption-key/{transit_key}", None),
        ("LIST", "keys", None),
    ]
    assert [_app_request(*request) for request in denied] == [403] * len(denied)
    assert vault.decrypt(transit_key, [ciphertext]) == [b"the key survived"]
    assert vault.key_latest_version(transit_key) == 1


def test_the_admin_token_is_read_from_its_file_when_first_needed(
    transit_key: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin_token"
    token_file.write_text(settings.VAULT_ADMIN_TOKEN + "\n")
    with override_settings(VAULT_ADMIN_TOKEN="", VAULT_ADMIN_TOKEN_FILE=str(token_file)):
        assert vault.rotate_key(transit_key) == 2
        token_file.unlink()
        with pytest.raises(vault.VaultError) as missing:
            vault.rotate_key(transit_key)
    assert missing.value.reason == "permission_denied"
    assert "VAULT_ADMIN_TOKEN_FILE" in str(missing.value)


def test_app_token_cannot_create_a_key_by_encrypting() -> None:
    name = f"user-t{uuid.uuid4().hex[:12]}"
    with pytest.raises(vault.VaultError) as caught:
        vault.encrypt(name, [b"upsert?"])
    assert caught.value.reason in ("permission_denied", "not_found")
    with pytest.raises(vault.VaultError) as reading:
        vault.key_latest_version(name)
    assert reading.value.reason == "not_found"


def test_data_key_is_reused_from_memory_without_a_second_vault_call(transit_key: str) -> None:
    context = b"om1|dk|test"
    plaintext, wrapped = vault.generate_data_key(transit_key, context=context)
    assert len(plaintext) == 32
    assert wrapped.startswith("vault:v1:")
    vault.forget_data_keys(transit_key)
    before = vault.call_count()
    first = vault.decrypt_data_key(transit_key, wrapped, context=context)
    second = vault.decrypt_data_key(transit_key, wrapped, context=context)
    assert first == second == plaintext
    assert vault.call_count() - before == 1


def test_data_key_cache_expires_after_its_ttl(transit_key: str) -> None:
    context = b"om1|dk|test"
    _, wrapped = vault.generate_data_key(transit_key, context=context)
    with override_settings(VAULT_DATA_KEY_TTL_S=0):
        vault.forget_data_keys(transit_key)
        before = vault.call_count()
        vault.decrypt_data_key(transit_key, wrapped, context=context)
        vault.decrypt_data_key(transit_key, wrapped, context=context)
    assert vault.call_count() - before == 2


async def test_async_twins_round_trip(transit_key: str) -> None:
    ciphertexts = await vault.aencrypt(transit_key, [b"a", b"b"])
    assert await vault.adecrypt(transit_key, ciphertexts) == [b"a", b"b"]
    plaintext, wrapped = await vault.agenerate_data_key(transit_key, context=b"c")
    assert await vault.adecrypt_data_key(transit_key, wrapped, context=b"c") == plaintext


def test_unreachable_address_raises_instead_of_hanging(closed_port: int) -> None:
    started = time.monotonic()
    with (
        override_settings(VAULT_ADDR=f"http://127.0.0.1:{closed_port}", VAULT_TIMEOUT_S=1.0),
        pytest.raises(vault.VaultError) as caught,
    ):
        vault.encrypt("user-1", [b"x"])
    assert caught.value.reason == "unreachable"
    assert time.monotonic() - started < 1.0


def test_silent_server_times_out_within_the_timeout(silent_port: int) -> None:
    started = time.monotonic()
    with (
        override_settings(VAULT_ADDR=f"http://127.0.0.1:{silent_port}", VAULT_TIMEOUT_S=0.5),
        pytest.raises(vault.VaultError) as caught,
    ):
        vault.encrypt("user-1", [b"x"])
    elapsed = time.monotonic() - started
    assert caught.value.reason == "timeout"
    assert 0.4 < elapsed < 2.0


def test_health_is_up_with_a_valid_token() -> None:
    assert vault.health() == {"status": "up", "reason": None}


def test_health_is_down_with_an_invalid_token() -> None:
    with override_settings(VAULT_TOKEN="s.not-a-token"):
        report = vault.health()
    assert report["status"] == "down"
    assert report["reason"].startswith("permission_denied")


def test_health_is_down_when_unreachable(closed_port: int) -> None:
    with override_settings(VAULT_ADDR=f"http://127.0.0.1:{closed_port}"):
        report = vault.health(timeout_s=0.5)
    assert report["status"] == "down"
    assert report["reason"].startswith("unreachable")


def test_app_token_renews_itself() -> None:
    assert vault.renew_token() > 3600
    assert vault.renew_token(admin=True) > 3600


def test_a_long_running_process_renews_its_tokens(transit_key: str) -> None:
    vault.encrypt(transit_key, [b"first use"])
    key = (settings.VAULT_ADDR, settings.VAULT_TOKEN)
    vault._renewed_at[key] -= vault.RENEW_EVERY_S + 1  # half a day later
    before = vault.call_count()
    vault.encrypt(transit_key, [b"after half a day"])
    vault.encrypt(transit_key, [b"and right after"])
    assert vault.call_count() - before == 3  # one renewal, two encrypts


def test_approle_login_replaces_the_token(transit_key: str) -> None:
    credentials = vault.approle_credentials(settings.VAULT_ADDR, settings.VAULT_ADMIN_TOKEN)
    with override_settings(
        VAULT_TOKEN="",
        VAULT_ROLE_ID=credentials["VAULT_ROLE_ID"],
        VAULT_SECRET_ID=credentials["VAULT_SECRET_ID"],
    ):
        (ciphertext,) = vault.encrypt(transit_key, [b"via approle"])
        assert vault.decrypt(transit_key, [ciphertext]) == [b"via approle"]
        assert vault.health()["status"] == "up"
        assert vault.renew_token() > 0


def test_revoked_approle_token_is_replaced_by_a_fresh_login(transit_key: str) -> None:
    credentials = vault.approle_credentials(settings.VAULT_ADDR, settings.VAULT_ADMIN_TOKEN)
    with override_settings(
        VAULT_TOKEN="",
        VAULT_ROLE_ID=credentials["VAULT_ROLE_ID"],
        VAULT_SECRET_ID=credentials["VAULT_SECRET_ID"],
    ):
        (ciphertext,) = vault.encrypt(transit_key, [b"first login"])
        # Revoke the token the process logged in with (as an expiry would).
        vault.token_revoke_self(settings.VAULT_ADDR, vault._app_token())
        assert vault.decrypt(transit_key, [ciphertext]) == [b"first login"]


def test_approle_login_with_a_wrong_secret_is_refused() -> None:
    credentials = vault.approle_credentials(settings.VAULT_ADDR, settings.VAULT_ADMIN_TOKEN)
    with (
        override_settings(
            VAULT_TOKEN="",
            VAULT_ROLE_ID=credentials["VAULT_ROLE_ID"],
            VAULT_SECRET_ID=str(uuid.uuid4()),
        ),
        pytest.raises(vault.VaultError) as caught,
    ):
        vault.encrypt("user-1", [b"x"])
    assert caught.value.reason in ("permission_denied", "invalid_request")


# --- a persistent raft server: restart, seal, root token --------------------------------------


def test_raft_server_revokes_its_root_token_and_keeps_secrets_private(
    raft_vault: EmbeddedOpenBao, raft_settings: dict[str, str]
) -> None:
    assert raft_vault.root_token is None
    for name in ("init.json", "tokens.json"):
        mode = stat.S_IMODE((raft_vault.directory / name).stat().st_mode)
        assert mode == 0o600, name
    assert set(raft_settings) == {"VAULT_ADDR", "VAULT_TOKEN", "VAULT_ADMIN_TOKEN"}
    assert vault.health() == {"status": "up", "reason": None}
    # Long-period tokens: a stopped installation does not find them expired.
    assert vault.renew_token() > 365 * 24 * 3600
    assert vault.renew_token(admin=True) > 365 * 24 * 3600


def test_raft_restart_and_unseal_keep_data_decryptable(
    raft_vault: EmbeddedOpenBao, raft_settings: dict[str, str]
) -> None:
    name = f"user-t{uuid.uuid4().hex[:12]}"
    vault.ensure_key(name)
    (ciphertext,) = vault.encrypt(name, [b"survives a restart"])
    sealed = crypto.seal(
        key_name=name, purpose="memory", owner_id=1, object_id="m1", plaintext=b"envelope"
    )
    raft_vault.stop()
    started = time.monotonic()
    raft_vault.start()
    restart_s = time.monotonic() - started
    assert raft_vault.configure() == raft_settings  # the stored tokens are reused
    crypto.forget_key(name)  # nothing warm: everything below goes to the restarted server
    assert vault.decrypt(name, [ciphertext]) == [b"survives a restart"]
    assert (
        crypto.open_sealed(
            key_name=name, purpose="memory", owner_id=1, object_id="m1", sealed=sealed
        )
        == b"envelope"
    )
    assert restart_s < 5.0
    vault.delete_key(name)


def test_sealed_server_is_reported_and_refuses_until_unsealed(
    raft_vault: EmbeddedOpenBao, raft_settings: dict[str, str]
) -> None:
    name = f"user-t{uuid.uuid4().hex[:12]}"
    vault.ensure_key(name)
    (ciphertext,) = vault.encrypt(name, [b"sealed away"])
    raft_vault.seal()
    try:
        report = vault.health()
        with pytest.raises(vault.VaultError) as caught:
            vault.decrypt(name, [ciphertext])
    finally:
        raft_vault.unseal()
    assert report == {"status": "down", "reason": report["reason"]}
    assert "sealed" in report["reason"]
    assert caught.value.reason == "sealed"
    assert vault.decrypt(name, [ciphertext]) == [b"sealed away"]
    vault.delete_key(name)


def test_hmac_batch_is_deterministic_and_one_vault_call(transit_key: str) -> None:
    before = vault.call_count()
    first = vault.hmac(transit_key, [b"alpha", b"beta"])
    assert vault.call_count() - before == 1
    assert [len(m) for m in first] == [32, 32]
    assert first[0] != first[1]
    assert vault.hmac(transit_key, [b"alpha"], key_version=1) == [first[0]]


# The app policy of OpenMates versions whose app token could not create or delete keys.
OLDER_APP_POLICY = """
path "{mount}/encrypt/*" {{ capabilities = ["update"] }}
path "{mount}/decrypt/*" {{ capabilities = ["update"] }}
path "{mount}/datakey/*" {{ capabilities = ["update"] }}
path "{mount}/rewrap/*" {{ capabilities = ["update"] }}
path "{mount}/hmac/*" {{ capabilities = ["update"] }}
path "auth/token/lookup-self" {{ capabilities = ["read"] }}
path "auth/token/renew-self" {{ capabilities = ["update"] }}
path "auth/token/revoke-self" {{ capabilities = ["update"] }}
"""


def test_a_raft_server_set_up_by_an_older_version_gets_the_current_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = EmbeddedOpenBao(tmp_path / "openbao", mode="raft")
    server.start()
    try:
        with monkeypatch.context() as older:
            older.setattr(vault, "_app_policy", lambda mount: OLDER_APP_POLICY.format(mount=mount))
            first = server.configure()
        server.policies_file.unlink()  # older versions kept no record of their policies
        name = f"user-t{uuid.uuid4().hex[:12]}"
        web = override_settings(
            VAULT_ADDR=first["VAULT_ADDR"],
            VAULT_TOKEN=first["VAULT_TOKEN"],
            VAULT_ADMIN_TOKEN="",
            VAULT_ADMIN_TOKEN_FILE="",
        )
        with web, pytest.raises(vault.VaultError) as refused:
            vault.ensure_key(name)
        assert refused.value.reason == "permission_denied"

        assert server.configure() == first  # the same tokens, now with the current policy
        with web:
            vault.ensure_key(name)
            assert vault.key_latest_version(name) == 1
        assert server.policies_file.read_text() == vault.policies_digest()
        # Nothing root-capable is left: no root token on disk, root generation closed.
        assert json.loads(server.init_file.read_text()).keys() == {"unseal_key"}
        assert "generate_root_endpoints = true" in (server.directory / "openbao.hcl").read_text()
        with pytest.raises(vault.VaultError):
            vault.server_generate_root(
                server.addr, json.loads(server.init_file.read_text())["unseal_key"]
            )
        assert server.admin_token_file.read_text() == first["VAULT_ADMIN_TOKEN"]
        assert stat.S_IMODE(server.admin_token_file.stat().st_mode) == 0o600
    finally:
        server.destroy()
