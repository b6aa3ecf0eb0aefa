"""The memory keys of one user of one instance (docs/crypto.md §4 and §8).

Memories are sealed under a transit key of their own, ``memory-<instance>-<user>-<gen>``,
not under ``user-<id>``: "forget everything" deletes it (a crypto-shred of the memories
alone, the user's chats stay readable), and account deletion deletes it with the user's
key. Under it, purpose ``memory`` seals the content (``openmates.crypto`` envelopes,
associated data ``om1|srv|memory|<user_id>|<memory_id>``) and purpose ``blind-index``
gives the stable HMAC secret of the blind index (``crypto.purpose_secret``). The
generation moves on with every forget, so a process still holding a data key or the
blind-index secret of the deleted key (at most ``VAULT_DATA_KEY_TTL_S``) never uses it
for a new memory.
"""

from __future__ import annotations

import threading

from asgiref.sync import sync_to_async

from openmates import crypto, vault

MEMORY = "memory"
BLIND_INDEX = "blind-index"

_ensured: set[str] = set()
_ensured_lock = threading.Lock()


def key_name(*, instance_id: int, user_id: int, generation: int) -> str:
    """``memory-<instance>-<user>-<generation>``."""
    return f"memory-{int(instance_id)}-{int(user_id)}-{int(generation)}"


def key_ensure(name: str) -> None:
    """Create the transit key ``name`` unless this process already made sure of it.

    Raises:
        openmates.vault.VaultError: Vault refused or is unreachable.
    """
    with _ensured_lock:
        if name in _ensured:
            return
    vault.ensure_key(name)
    with _ensured_lock:
        _ensured.add(name)


async def akey_ensure(name: str) -> None:
    """Async twin of :func:`key_ensure` (no thread hop once ensured)."""
    with _ensured_lock:
        if name in _ensured:
            return
    await sync_to_async(key_ensure, thread_sensitive=False)(name)


def key_shred(name: str) -> None:
    """Delete the transit key ``name`` (crypto-shred) and every cached key under it.

    Raises:
        openmates.vault.VaultError: Vault could not delete it (a missing key is fine).
    """
    with _ensured_lock:
        _ensured.discard(name)
    vault.delete_key(name)
    crypto.forget_key(name)


def content_seal(*, key: str, user_id: int, memory_id: str, content: str) -> bytes:
    """Seal a memory's text (purpose ``memory``; warm: no Vault call).

    Raises:
        openmates.vault.VaultError: a cold data key and Vault unusable.
    """
    return crypto.seal(
        key_name=key,
        purpose=MEMORY,
        owner_id=user_id,
        object_id=memory_id,
        plaintext=content.encode(),
    )


def content_open(*, key: str, user_id: int, memory_id: str, sealed: bytes) -> str:
    """The text of a memory sealed by :func:`content_seal`.

    Raises:
        openmates.crypto.DecryptionError: shredded key, another owner or memory, tampering.
        openmates.vault.VaultError: a cold data key and Vault unusable.
    """
    return crypto.open_sealed(
        key_name=key, purpose=MEMORY, owner_id=user_id, object_id=memory_id, sealed=sealed
    ).decode()


def data_key_warm(key: str) -> None:
    """Make sure sealing under ``key`` needs no Vault call (one call when cold).

    Raises:
        openmates.vault.VaultError: Vault refused or is unreachable.
    """
    crypto.current_data_key(key, MEMORY)


def blind_secret(key: str) -> bytes:
    """The blind-index HMAC secret under ``key`` (one Vault call when cold).

    Raises:
        openmates.vault.VaultError: ``not_found`` after a shred, transport reasons.
    """
    return crypto.purpose_secret(key, BLIND_INDEX)


async def ablind_secret(key: str) -> bytes:
    """Async twin of :func:`blind_secret` (stays on the loop when warm)."""
    return await crypto.apurpose_secret(key, BLIND_INDEX)
