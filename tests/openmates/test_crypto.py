"""Server-side envelope encryption (docs/crypto.md §4) against real OpenBao and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import override_settings

from openmates import crypto, vault


def _seal(key: str, plaintext: bytes = b"secret text", **overrides: object) -> bytes:
    args: dict[str, object] = {
        "key_name": key,
        "purpose": "ai-cache",
        "owner_id": 7,
        "object_id": "chat-1",
        "plaintext": plaintext,
    }
    args.update(overrides)
    return crypto.seal(**args)  # type: ignore[arg-type]


def _open(key: str, sealed: bytes, **overrides: object) -> bytes:
    args: dict[str, object] = {
        "key_name": key,
        "purpose": "ai-cache",
        "owner_id": 7,
        "object_id": "chat-1",
        "sealed": sealed,
    }
    args.update(overrides)
    return crypto.open_sealed(**args)  # type: ignore[arg-type]


def _drop_process_memory(key: str) -> None:
    """What a fresh process would hold: nothing in memory, the Redis share intact."""
    crypto.forget_key(key, shared=False)


def test_seal_and_open_round_trip(transit_key: str) -> None:
    sealed = _seal(transit_key, "Grüße 👋".encode())
    assert "Grüße".encode() not in sealed
    assert sealed[0] == crypto.FORMAT_VERSION
    assert _open(transit_key, sealed) == "Grüße 👋".encode()


def test_same_plaintext_seals_differently_each_time(transit_key: str) -> None:
    assert _seal(transit_key) != _seal(transit_key)


@pytest.mark.parametrize(
    "changed",
    [{"owner_id": 8}, {"object_id": "chat-2"}, {"purpose": "embed"}],
    ids=["other-owner", "other-object", "other-purpose"],
)
def test_wrong_associated_data_is_refused(transit_key: str, changed: dict[str, object]) -> None:
    sealed = _seal(transit_key)
    with pytest.raises(crypto.DecryptionError):
        _open(transit_key, sealed, **changed)


def test_tampered_value_is_refused(transit_key: str) -> None:
    sealed = bytearray(_seal(transit_key))
    sealed[-1] ^= 0x01
    with pytest.raises(crypto.DecryptionError):
        _open(transit_key, bytes(sealed))


def test_malformed_value_is_refused(transit_key: str) -> None:
    for junk in (b"", b"\x02abc", b"\x01\x05ai-ca", _seal(transit_key)[:40]):
        with pytest.raises(crypto.DecryptionError):
            _open(transit_key, junk)


def test_another_users_key_does_not_open_it(transit_key: str, other_transit_key: str) -> None:
    sealed = _seal(transit_key)
    with pytest.raises(crypto.DecryptionError):
        _open(other_transit_key, sealed)


def test_unknown_purpose_is_a_programming_error(transit_key: str) -> None:
    with pytest.raises(ValueError, match="unknown purpose"):
        _seal(transit_key, purpose="chat")


def test_warm_seal_and_open_make_no_vault_call(transit_key: str) -> None:
    _open(transit_key, _seal(transit_key))  # warm up
    before = vault.call_count()
    for i in range(20):
        sealed = _seal(transit_key, f"turn {i}".encode(), object_id=f"chat-{i}")
        assert _open(transit_key, sealed, object_id=f"chat-{i}") == f"turn {i}".encode()
    assert vault.call_count() == before


def test_cold_seal_makes_one_vault_call_and_shares_the_wrapped_key(transit_key: str) -> None:
    before = vault.call_count()
    sealed = _seal(transit_key)
    assert vault.call_count() - before == 1
    shared = cache.get(f"vault:dk:{transit_key}:ai-cache")
    assert isinstance(shared, str)
    assert shared.startswith("vault:v1:")
    assert shared.encode() in sealed


def test_processes_converge_on_one_data_key_through_redis(transit_key: str) -> None:
    first = crypto.current_data_key(transit_key, "memory")
    _drop_process_memory(transit_key)  # as if another process started
    before = vault.call_count()
    second = crypto.current_data_key(transit_key, "memory")
    assert second == first
    assert vault.call_count() - before == 1  # unwrap only, no new data key
    assert crypto.current_data_key(transit_key, "embed")[1] != first[1]


def test_value_opens_in_a_process_that_never_saw_its_data_key(transit_key: str) -> None:
    sealed = _seal(transit_key)
    crypto.forget_key(transit_key)
    assert _open(transit_key, sealed) == b"secret text"


def test_deleted_key_no_longer_opens_while_another_users_still_does(
    transit_key: str, other_transit_key: str
) -> None:
    mine = _seal(transit_key, b"mine", owner_id=1)
    theirs = _seal(other_transit_key, b"theirs", owner_id=2)
    vault.delete_key(transit_key)
    crypto.forget_key(transit_key)
    with pytest.raises(crypto.DecryptionError):
        _open(transit_key, mine, owner_id=1)
    _drop_process_memory(other_transit_key)
    assert _open(other_transit_key, theirs, owner_id=2) == b"theirs"


def test_rotation_keeps_old_values_and_rewrap_moves_them_to_the_new_version(
    transit_key: str,
) -> None:
    old = _seal(transit_key, b"old")
    assert crypto.sealed_key_version(old) == 1
    assert vault.rotate_key(transit_key) == 2
    crypto.forget_key(transit_key)
    new = _seal(transit_key, b"new")
    assert crypto.sealed_key_version(new) == 2
    rewrapped = crypto.rewrap_sealed(transit_key, old)
    assert crypto.sealed_key_version(rewrapped) == 2
    crypto.forget_key(transit_key)
    assert _open(transit_key, old) == b"old"
    assert _open(transit_key, rewrapped) == b"old"
    assert _open(transit_key, new) == b"new"


def test_cold_open_with_vault_unreachable_raises_vault_error(
    transit_key: str, closed_port: int
) -> None:
    sealed = _seal(transit_key)
    with override_settings(VAULT_ADDR=f"http://127.0.0.1:{closed_port}", VAULT_TIMEOUT_S=1.0):
        with pytest.raises(vault.VaultError) as caught:
            _open(transit_key, sealed)
        assert caught.value.reason == "unreachable"


def test_seal_for_a_missing_transit_key_raises_not_found() -> None:
    with pytest.raises(vault.VaultError) as caught:
        _seal("user-never-created")
    assert caught.value.reason in ("not_found", "permission_denied")


async def test_async_twins_stay_off_vault_when_warm(transit_key: str) -> None:
    sealed = await crypto.aseal(
        key_name=transit_key, purpose="embed", owner_id=3, object_id="e1", plaintext=b"tool out"
    )
    before = vault.call_count()
    again = await crypto.aseal(
        key_name=transit_key, purpose="embed", owner_id=3, object_id="e2", plaintext=b"more"
    )
    opened = await crypto.aopen_sealed(
        key_name=transit_key, purpose="embed", owner_id=3, object_id="e1", sealed=sealed
    )
    assert opened == b"tool out"
    assert vault.call_count() == before
    crypto.forget_key(transit_key)
    reopened = await crypto.aopen_sealed(
        key_name=transit_key, purpose="embed", owner_id=3, object_id="e2", sealed=again
    )
    assert reopened == b"more"
    assert vault.call_count() - before == 1


def test_purpose_secret_is_stable_across_processes_and_rotations(
    transit_key: str, other_transit_key: str
) -> None:
    first = crypto.purpose_secret(transit_key, "blind-index")
    assert len(first) == 32
    before = vault.call_count()
    assert crypto.purpose_secret(transit_key, "blind-index") == first
    assert vault.call_count() == before  # warm
    vault.rotate_key(transit_key)
    crypto.forget_key(transit_key)
    assert crypto.purpose_secret(transit_key, "blind-index") == first
    assert crypto.purpose_secret(transit_key, "memory") != first
    assert crypto.purpose_secret(other_transit_key, "blind-index") != first


def test_purpose_secret_is_gone_with_the_key(transit_key: str) -> None:
    crypto.purpose_secret(transit_key, "blind-index")
    vault.delete_key(transit_key)
    crypto.forget_key(transit_key)
    with pytest.raises(vault.VaultError) as caught:
        crypto.purpose_secret(transit_key, "blind-index")
    assert caught.value.reason == "not_found"


async def test_async_purpose_secret_matches_the_sync_one(transit_key: str) -> None:
    assert await crypto.apurpose_secret(transit_key, "blind-index") == crypto.purpose_secret(
        transit_key, "blind-index"
    )


def test_another_process_uses_the_same_data_key(transit_key: str) -> None:
    _, wrapped = crypto.current_data_key(transit_key, "server-managed")
    script = (
        "import django, sys\n"
        "django.setup()\n"
        "from openmates import crypto, vault\n"
        f"plain, wrapped = crypto.current_data_key({transit_key!r}, 'server-managed')\n"
        "sys.stdout.write(f'{wrapped} {vault.call_count()}')\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "openmates.settings"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    their_wrapped, their_calls = result.stdout.split()
    assert their_wrapped == wrapped
    assert their_calls == "1"  # unwrapped the shared key; made none of its own


async def test_many_values_open_in_order_across_data_keys_with_one_vault_call_per_key(
    transit_key: str,
) -> None:
    # A chat's AI cache: entries sealed before and after a key rotation (two data keys).
    early = [_seal(transit_key, f"entry {n}".encode()) for n in range(3)]
    vault.rotate_key(transit_key)
    crypto.forget_key(transit_key)
    late = [_seal(transit_key, f"entry {n}".encode()) for n in range(3, 5)]
    crypto.forget_key(transit_key, shared=False)
    before = vault.call_count()

    opened = await crypto.aopen_sealed_many(
        key_name=transit_key,
        purpose="ai-cache",
        owner_id=7,
        object_id="chat-1",
        sealed=[early[0], late[0], early[1], late[1], early[2]],
    )

    assert opened == [f"entry {n}".encode() for n in (0, 3, 1, 4, 2)]
    assert vault.call_count() - before == 2  # one unwrap per data key, not per value


@pytest.mark.parametrize(
    "changed",
    [{"owner_id": 8}, {"object_id": "chat-2"}, {"purpose": "embed"}],
    ids=["other-owner", "other-object", "other-purpose"],
)
async def test_many_values_refuse_another_owner_object_or_purpose(
    transit_key: str, changed: dict[str, object]
) -> None:
    good = _seal(transit_key, b"fine")
    args: dict[str, object] = {
        "key_name": transit_key,
        "purpose": "ai-cache",
        "owner_id": 7,
        "object_id": "chat-1",
        "sealed": [good, good],
    }
    with pytest.raises(crypto.DecryptionError):
        await crypto.aopen_sealed_many(**(args | changed))  # type: ignore[arg-type]


async def test_many_values_refuse_a_tampered_one_among_good_ones(transit_key: str) -> None:
    good = _seal(transit_key, b"fine")
    tampered = bytearray(_seal(transit_key, b"changed"))
    tampered[-1] ^= 1
    with pytest.raises(crypto.DecryptionError):
        await crypto.aopen_sealed_many(
            key_name=transit_key,
            purpose="ai-cache",
            owner_id=7,
            object_id="chat-1",
            sealed=[good, bytes(tampered)],
        )
