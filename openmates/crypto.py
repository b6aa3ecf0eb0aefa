"""Server-side envelope encryption (docs/crypto.md §4): local AES-256-GCM under Vault data keys.

One data key per (transit key, purpose) at a time. Its plaintext lives in process memory
for at most ``settings.VAULT_DATA_KEY_TTL_S``; its wrapped form is shared through Redis
(``vault:dk:<key>:<purpose>``) so every process converges on the same data key, and it
is stored inside every sealed value so a value opens anywhere. Once warm, sealing and
opening make no Vault call.

Sealed format (bytes)::

    0x01 | len(purpose) (1 byte) | purpose | len(wrapped) (2 bytes, big-endian) | wrapped
         | nonce (12 bytes) | AES-256-GCM ciphertext with tag

Associated data: ``om1|srv|<purpose>|<owner_id>|<object_id>``. The data key is unwrapped
with the derivation context ``om1|dk|<purpose>`` of the (derived) transit key, so
purposes are separated both by data key and by derivation.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Sequence

import redis
from asgiref.sync import sync_to_async
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.cache import cache
from django_redis.exceptions import ConnectionInterrupted

from openmates import vault

logger = logging.getLogger(__name__)

PURPOSES = frozenset({"ai-cache", "embed", "memory", "blind-index", "server-managed", "secret"})
FORMAT_VERSION = 1
NONCE_BYTES = 12
# How long one shared data key is handed out for new values before a fresh one is made
# (bounds the number of random nonces per key far below AES-GCM's limit).
DATA_KEY_SHARE_TTL_S = 24 * 3600

_REDIS_ERRORS = (ConnectionInterrupted, redis.RedisError, OSError)


class DecryptionError(Exception):
    """A sealed value cannot be opened: wrong, replaced or deleted key, tampering, wrong
    associated data, or a malformed value. Never carries plaintext."""


def _check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise ValueError(f"unknown purpose {purpose!r}; expected one of {sorted(PURPOSES)}")


def data_key_context(purpose: str) -> bytes:
    """The transit derivation context of data keys for ``purpose``."""
    return f"om1|dk|{purpose}".encode()


def associated_data(purpose: str, owner_id: str | int, object_id: str) -> bytes:
    """``om1|srv|<purpose>|<owner_id>|<object_id>`` as bytes."""
    return f"om1|srv|{purpose}|{owner_id}|{object_id}".encode()


def _share_key(key_name: str, purpose: str) -> str:
    return f"vault:dk:{key_name}:{purpose}"


# (Vault address, key name, purpose) -> (plaintext data key, wrapped, expiry monotonic s)
_current: dict[tuple[str, str, str], tuple[bytes, str, float]] = {}
_current_lock = threading.Lock()


def _warm_data_key(key_name: str, purpose: str) -> tuple[bytes, str] | None:
    slot = (settings.VAULT_ADDR, key_name, purpose)
    with _current_lock:
        hit = _current.get(slot)
        if hit is None:
            return None
        if hit[2] <= time.monotonic():
            del _current[slot]
            return None
        return hit[0], hit[1]


def _keep_data_key(key_name: str, purpose: str, plaintext: bytes, wrapped: str) -> None:
    expires = time.monotonic() + float(settings.VAULT_DATA_KEY_TTL_S)
    with _current_lock:
        _current[(settings.VAULT_ADDR, key_name, purpose)] = (plaintext, wrapped, expires)


def _shared_wrapped(key_name: str, purpose: str) -> str | None:
    try:
        value = cache.get(_share_key(key_name, purpose))
    except _REDIS_ERRORS as exc:
        logger.warning("data key share unreadable (%s); using a process-local key", exc)
        return None
    return value if isinstance(value, str) else None


def _publish_wrapped(key_name: str, purpose: str, wrapped: str) -> str:
    """Offer ``wrapped`` as the shared data key; return the one every process should use."""
    try:
        if cache.add(_share_key(key_name, purpose), wrapped, timeout=DATA_KEY_SHARE_TTL_S):
            return wrapped
        winner = cache.get(_share_key(key_name, purpose))
    except _REDIS_ERRORS as exc:
        logger.warning("data key share unwritable (%s); using a process-local key", exc)
        return wrapped
    return winner if isinstance(winner, str) else wrapped


def current_data_key(key_name: str, purpose: str) -> tuple[bytes, str]:
    """The data key new values of (``key_name``, ``purpose``) are sealed with.

    Returns ``(plaintext 32 bytes, wrapped)``. Warm: no Vault or Redis call. Cold: the
    wrapped key shared in Redis is unwrapped (one Vault call), else a new one is made
    (one call) and published; losing that race adopts the winner's (one more call).

    Raises:
        vault.VaultError: Vault refused or is unreachable.
    """
    _check_purpose(purpose)
    warm = _warm_data_key(key_name, purpose)
    if warm is not None:
        return warm
    context = data_key_context(purpose)
    wrapped = _shared_wrapped(key_name, purpose)
    if wrapped is not None:
        try:
            plaintext = vault.decrypt_data_key(key_name, wrapped, context=context)
        except vault.VaultError as exc:
            # A share from before a rotation/re-creation no longer unwraps: replace it.
            if exc.reason not in ("not_found", "invalid_request"):
                raise
            _drop_share(key_name, purpose)
            wrapped = None
    if wrapped is None:
        plaintext, mine = vault.generate_data_key(key_name, context=context)
        wrapped = _publish_wrapped(key_name, purpose, mine)
        if wrapped != mine:
            plaintext = vault.decrypt_data_key(key_name, wrapped, context=context)
    _keep_data_key(key_name, purpose, plaintext, wrapped)
    return plaintext, wrapped


def _drop_share(key_name: str, purpose: str) -> None:
    try:
        cache.delete(_share_key(key_name, purpose))
    except _REDIS_ERRORS as exc:
        logger.warning("data key share not deleted (%s)", exc)


def forget_key(key_name: str, *, shared: bool = True) -> None:
    """Drop every cached data key of ``key_name``: this process's memory and, unless
    ``shared=False``, the Redis share (call after deleting or rotating the transit key)."""
    with _current_lock:
        for slot in [s for s in _current if s[1] == key_name]:
            del _current[slot]
        for slot in [s for s in _secrets if s[1] == key_name]:
            del _secrets[slot]
    vault.forget_data_keys(key_name)
    if not shared:
        return
    try:
        cache.delete_many([_share_key(key_name, p) for p in PURPOSES])
    except _REDIS_ERRORS as exc:
        logger.warning("data key shares of %s not deleted (%s)", key_name, exc)


# (Vault address, key name, purpose) -> (secret, expiry monotonic s)
_secrets: dict[tuple[str, str, str], tuple[bytes, float]] = {}


def purpose_secret(key_name: str, purpose: str) -> bytes:
    """A stable 32-byte secret of (``key_name``, ``purpose``), e.g. the blind-index HMAC key.

    Unlike data keys it never changes: it is Vault's HMAC (key version 1) of the label
    ``om1|secret|<purpose>``, so it is the same in every process, survives rotations, and
    is gone once the transit key is deleted. Held in memory for ``VAULT_DATA_KEY_TTL_S``;
    cold costs one Vault call.

    Raises:
        ValueError: unknown purpose.
        vault.VaultError: ``not_found`` after the key was deleted, transport reasons.
    """
    _check_purpose(purpose)
    slot = (settings.VAULT_ADDR, key_name, purpose)
    with _current_lock:
        hit = _secrets.get(slot)
    if hit is not None and hit[1] > time.monotonic():
        return hit[0]
    (secret,) = vault.hmac(key_name, [f"om1|secret|{purpose}".encode()], key_version=1)
    with _current_lock:
        _secrets[slot] = (secret, time.monotonic() + float(settings.VAULT_DATA_KEY_TTL_S))
    return secret


async def apurpose_secret(key_name: str, purpose: str) -> bytes:
    """Async twin of :func:`purpose_secret`; stays on the event loop when warm."""
    slot = (settings.VAULT_ADDR, key_name, purpose)
    with _current_lock:
        hit = _secrets.get(slot)
    if hit is not None and hit[1] > time.monotonic():
        return hit[0]
    return await sync_to_async(purpose_secret, thread_sensitive=False)(key_name, purpose)


# --- format ------------------------------------------------------------------------------------


def _pack(purpose: str, wrapped: str, nonce: bytes, ciphertext: bytes) -> bytes:
    p, w = purpose.encode(), wrapped.encode("ascii")
    return b"".join(
        (bytes([FORMAT_VERSION, len(p)]), p, struct.pack(">H", len(w)), w, nonce, ciphertext)
    )


def _unpack(sealed: bytes) -> tuple[str, str, bytes, bytes]:
    """Split a sealed value into (purpose, wrapped, nonce, ciphertext).

    Raises:
        DecryptionError: the value is not in the sealed format.
    """
    try:
        if sealed[0] != FORMAT_VERSION:
            raise DecryptionError(f"unknown sealed format version {sealed[0]}")
        plen = sealed[1]
        purpose = sealed[2 : 2 + plen].decode()
        (wlen,) = struct.unpack(">H", sealed[2 + plen : 4 + plen])
        start = 4 + plen
        wrapped = sealed[start : start + wlen].decode("ascii")
        nonce = sealed[start + wlen : start + wlen + NONCE_BYTES]
        ciphertext = sealed[start + wlen + NONCE_BYTES :]
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecryptionError("malformed sealed value") from exc
    if len(wrapped) != wlen or len(nonce) != NONCE_BYTES or len(ciphertext) < 16:
        raise DecryptionError("truncated sealed value")
    return purpose, wrapped, nonce, ciphertext


def _seal_with(
    data_key: bytes, wrapped: str, purpose: str, owner_id: str | int, object_id: str, plain: bytes
) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(data_key).encrypt(
        nonce, plain, associated_data(purpose, owner_id, object_id)
    )
    return _pack(purpose, wrapped, nonce, ciphertext)


def _open_with(
    data_key: bytes, nonce: bytes, ciphertext: bytes, purpose: str, owner_id: str | int, oid: str
) -> bytes:
    try:
        return AESGCM(data_key).decrypt(nonce, ciphertext, associated_data(purpose, owner_id, oid))
    except InvalidTag:
        raise DecryptionError(
            "sealed value does not open: tampered, or sealed for another purpose/owner/object"
        ) from None


# --- envelope ----------------------------------------------------------------------------------


def seal(
    *, key_name: str, purpose: str, owner_id: str | int, object_id: str, plaintext: bytes
) -> bytes:
    """Encrypt ``plaintext`` under the current data key of (``key_name``, ``purpose``).

    Returns the sealed bytes (format in the module docstring). Warm: no Vault call.

    Raises:
        ValueError: unknown purpose.
        vault.VaultError: a cold data key and Vault refused or is unreachable (``not_found``
            when the transit key does not exist).
    """
    data_key, wrapped = current_data_key(key_name, purpose)
    return _seal_with(data_key, wrapped, purpose, owner_id, object_id, plaintext)


def _unwrap(key_name: str, wrapped: str, purpose: str) -> bytes:
    try:
        return vault.decrypt_data_key(key_name, wrapped, context=data_key_context(purpose))
    except vault.VaultError as exc:
        if exc.reason in ("not_found", "invalid_request"):
            raise DecryptionError(f"data key does not unwrap with {key_name}: {exc}") from None
        raise


def open_sealed(
    *, key_name: str, purpose: str, owner_id: str | int, object_id: str, sealed: bytes
) -> bytes:
    """Decrypt a value made by :func:`seal` with the same key, purpose, owner and object.

    Raises:
        DecryptionError: wrong/replaced/deleted key, tampering, wrong associated data, or
            a malformed value.
        vault.VaultError: the data key is cold and Vault is unreachable, sealed, slow or
            refuses the token.
    """
    _check_purpose(purpose)
    stored_purpose, wrapped, nonce, ciphertext = _unpack(bytes(sealed))
    if stored_purpose != purpose:
        raise DecryptionError(f"sealed for purpose {stored_purpose!r}, not {purpose!r}")
    data_key = _unwrap(key_name, wrapped, purpose)
    return _open_with(data_key, nonce, ciphertext, purpose, owner_id, object_id)


def rewrap_sealed(key_name: str, sealed: bytes) -> bytes:
    """Re-wrap the data key inside ``sealed`` under the latest transit key version.

    The plaintext and the local ciphertext are unchanged; one Vault call.

    Raises:
        DecryptionError: malformed value, or the wrapped data key is not of ``key_name``.
        vault.VaultError: Vault unreachable or refusing.
    """
    purpose, wrapped, nonce, ciphertext = _unpack(bytes(sealed))
    try:
        (fresh,) = vault.rewrap(key_name, [wrapped], context=data_key_context(purpose))
    except vault.VaultError as exc:
        if exc.reason in ("not_found", "invalid_request"):
            raise DecryptionError(f"data key does not rewrap with {key_name}: {exc}") from None
        raise
    return _pack(purpose, fresh, nonce, ciphertext)


def sealed_key_version(sealed: bytes) -> int:
    """The transit key version that wraps the data key of ``sealed`` (``vault:v<N>:``).

    Raises:
        DecryptionError: malformed value.
    """
    _, wrapped, _, _ = _unpack(bytes(sealed))
    prefix = wrapped.split(":")
    if len(prefix) < 3 or not prefix[1].startswith("v") or not prefix[1][1:].isdigit():
        raise DecryptionError("wrapped data key has no version")
    return int(prefix[1][1:])


async def aseal(
    *, key_name: str, purpose: str, owner_id: str | int, object_id: str, plaintext: bytes
) -> bytes:
    """Async twin of :func:`seal`: on the event loop when warm, else in a worker thread."""
    _check_purpose(purpose)
    warm = _warm_data_key(key_name, purpose)
    if warm is not None:
        return _seal_with(warm[0], warm[1], purpose, owner_id, object_id, plaintext)
    return await sync_to_async(seal, thread_sensitive=False)(
        key_name=key_name,
        purpose=purpose,
        owner_id=owner_id,
        object_id=object_id,
        plaintext=plaintext,
    )


async def aopen_sealed_many(
    *, key_name: str, purpose: str, owner_id: str | int, object_id: str, sealed: Sequence[bytes]
) -> list[bytes]:
    """:func:`aopen_sealed` of each of ``sealed`` (values of one owner and object, e.g. a
    chat's AI cache entries), in order: one cipher and one associated data for all the
    values under the same data key, on the event loop while that key is warm.

    Raises:
        DecryptionError: as :func:`open_sealed`, for the first value that does not open.
        vault.VaultError: as :func:`open_sealed`.
    """
    _check_purpose(purpose)
    aad = associated_data(purpose, owner_id, object_id)
    ciphers: dict[str, AESGCM] = {}
    opened: list[bytes] = []
    for value in sealed:
        stored_purpose, wrapped, nonce, ciphertext = _unpack(bytes(value))
        if stored_purpose != purpose:
            raise DecryptionError(f"sealed for purpose {stored_purpose!r}, not {purpose!r}")
        cipher = ciphers.get(wrapped)
        if cipher is None:
            data_key = vault.cached_data_key(key_name, wrapped, context=data_key_context(purpose))
            if data_key is None:
                data_key = await sync_to_async(_unwrap, thread_sensitive=False)(
                    key_name, wrapped, purpose
                )
            cipher = ciphers[wrapped] = AESGCM(data_key)
        try:
            opened.append(cipher.decrypt(nonce, ciphertext, aad))
        except InvalidTag:
            raise DecryptionError(
                "sealed value does not open: tampered, or sealed for another purpose/owner/object"
            ) from None
    return opened


async def aopen_sealed(
    *, key_name: str, purpose: str, owner_id: str | int, object_id: str, sealed: bytes
) -> bytes:
    """Async twin of :func:`open_sealed`: on the event loop when the data key is warm."""
    _check_purpose(purpose)
    stored_purpose, wrapped, nonce, ciphertext = _unpack(bytes(sealed))
    if stored_purpose != purpose:
        raise DecryptionError(f"sealed for purpose {stored_purpose!r}, not {purpose!r}")
    data_key = vault.cached_data_key(key_name, wrapped, context=data_key_context(purpose))
    if data_key is None:
        data_key = await sync_to_async(_unwrap, thread_sensitive=False)(key_name, wrapped, purpose)
    return _open_with(data_key, nonce, ciphertext, purpose, owner_id, object_id)
