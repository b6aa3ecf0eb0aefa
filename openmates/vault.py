"""The Vault seam: transit encryption, data keys and key management through ``hvac``.

This is the only module that imports ``hvac`` (ruff TID251). OpenBao speaks the same API.

Two tokens, two privileges (docs/crypto.md §4):

* the **app token** (``settings.VAULT_TOKEN``, or an AppRole login with
  ``settings.VAULT_ROLE_ID``/``VAULT_SECRET_ID``) may encrypt, decrypt, create data keys,
  rewrap and HMAC (the stable per-purpose secrets of ``openmates.crypto``), look itself
  up, renew and revoke itself, and run the lifecycle of the per-user and per-instance
  keys the web process needs (sign-up, a first turn, an instance made or deleted in the
  admin, account deletion): create a transit key of exactly OpenMates' kind
  (``aes256-gcm96``, derived), read its versions, allow its deletion and delete it
  (``ensure_key``, ``key_latest_version``, ``delete_key``). It cannot rotate, trim,
  export or reconfigure a key otherwise, list keys, or create any other kind;
* the **admin token** rotates keys, mints app credentials, seals the server and takes
  raft snapshots: management commands only. It is read when first needed, from
  ``settings.VAULT_ADMIN_TOKEN`` or the file ``settings.VAULT_ADMIN_TOKEN_FILE`` names,
  so a web process, which never needs it, never holds it.

Every call is bounded by ``settings.VAULT_TIMEOUT_S`` and every failure is one
:class:`VaultError` whose ``reason`` names what went wrong. Plaintext data keys are kept
in process memory for at most ``settings.VAULT_DATA_KEY_TTL_S`` seconds, so warm
envelope operations (``openmates.crypto``) make no Vault call. :func:`call_count` counts
the HTTP requests this process has sent to Vault, for benchmarks and tests.

The server-level helpers at the bottom (:func:`bootstrap`, :func:`server_status`,
:func:`server_initialize`, :func:`server_unseal`, ...) take an explicit address and token
and never read Django settings: the embedded runner and the test plugin call them before
settings are loaded.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hvac
import hvac.exceptions
import hvac.utils
import requests
from asgiref.sync import sync_to_async
from django.conf import settings

APP_POLICY = "openmates-app"
ADMIN_POLICY = "openmates-admin"
APP_ROLE = "openmates-app"
# Periodic tokens: renewable indefinitely, each renewal grants this much time again.
TOKEN_PERIOD = "768h"  # noqa: S105 (a duration, not a secret)
# Transit keys with derived=True need a context; this one is used when a caller gives none.
DEFAULT_CONTEXT = b"om1|default"

_REASONS = ("unreachable", "sealed", "timeout", "permission_denied", "not_found", "invalid_request")

T = TypeVar("T")
logger = logging.getLogger(__name__)


class VaultError(Exception):
    """A Vault call failed.

    ``reason`` is one of ``"unreachable"``, ``"sealed"``, ``"timeout"``,
    ``"permission_denied"``, ``"not_found"``, ``"invalid_request"``; ``str()`` says what
    was attempted and what Vault (or the network) answered. Never carries plaintext.
    """

    def __init__(self, reason: str, message: str) -> None:
        if reason not in _REASONS:
            raise ValueError(f"unknown VaultError reason {reason!r}")
        super().__init__(message)
        self.reason = reason

    @property
    def is_outage(self) -> bool:
        """True when Vault could not be used (unreachable, sealed, timed out): retry later.

        False for set-up faults (a missing key, a refused token) that a retry cannot fix.
        """
        return self.reason in {"unreachable", "sealed", "timeout"}


# --- HTTP plumbing -----------------------------------------------------------------------

_requests_seen = 0
_count_lock = threading.Lock()


def call_count() -> int:
    """How many HTTP requests this process has sent to Vault so far (monotonic).

    Benchmarks and tests take the difference before and after an operation.
    """
    with _count_lock:
        return _requests_seen


def _count_request() -> None:
    global _requests_seen
    with _count_lock:
        _requests_seen += 1


class _CountingAdapter(hvac.adapters.JSONAdapter):
    """hvac's JSON adapter, counting every request it sends."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        _count_request()
        return super().request(*args, **kwargs)


_local = threading.local()


def _client(addr: str, token: str | None, timeout_s: float) -> hvac.Client:
    """An hvac client for (addr, token, timeout), one per thread (requests sessions are not
    documented as thread-safe), reused so connections stay alive."""
    cache: dict[tuple[str, str | None, float], hvac.Client] | None = getattr(
        _local, "clients", None
    )
    if cache is None:
        cache = _local.clients = {}
    key = (addr, token, timeout_s)
    client = cache.get(key)
    if client is None:
        if len(cache) > 32:
            cache.clear()
        client = hvac.Client(url=addr, token=token, timeout=timeout_s, adapter=_CountingAdapter)
        cache[key] = client
    return client


def _message(exc: hvac.exceptions.VaultError) -> str:
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        return "; ".join(str(e) for e in errors)
    return str(exc) or type(exc).__name__


def _means_missing(lowered_message: str) -> bool:
    # Transit words a missing key differently per endpoint ("encryption key not found",
    # "no existing key named ... could be found").
    return "not found" in lowered_message or "no existing key" in lowered_message


def _translate(exc: Exception, what: str) -> VaultError:
    """Map an hvac/requests exception to a VaultError with a stable reason."""
    if isinstance(exc, requests.exceptions.Timeout):
        return VaultError("timeout", f"{what}: Vault did not answer in time ({exc})")
    if isinstance(exc, requests.exceptions.RequestException):
        return VaultError("unreachable", f"{what}: Vault is unreachable ({exc})")
    if isinstance(exc, hvac.exceptions.VaultError):
        text = _message(exc)
        lowered = text.lower()
        if "sealed" in lowered:
            return VaultError("sealed", f"{what}: Vault is sealed")
        if isinstance(exc, hvac.exceptions.Forbidden | hvac.exceptions.Unauthorized):
            return VaultError("permission_denied", f"{what}: permission denied ({text})")
        if isinstance(exc, hvac.exceptions.InvalidPath) or _means_missing(lowered):
            return VaultError("not_found", f"{what}: not found ({text})")
        if isinstance(exc, hvac.exceptions.InvalidRequest | hvac.exceptions.ParamValidationError):
            return VaultError("invalid_request", f"{what}: invalid request ({text})")
        if isinstance(exc, hvac.exceptions.VaultNotInitialized):
            return VaultError("sealed", f"{what}: Vault is not initialised")
        return VaultError("unreachable", f"{what}: Vault failed ({type(exc).__name__}: {text})")
    raise exc


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (hvac.exceptions.VaultError, requests.exceptions.RequestException) as exc:
        raise _translate(exc, what) from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _json(response: Any, what: str) -> dict[str, Any]:
    if isinstance(response, dict):
        return response
    # JSONAdapter returns the raw Response for 204 and other non-200 successes.
    if getattr(response, "status_code", None) == 204:
        return {}
    try:
        loaded = response.json()
    except ValueError:
        return {}
    if not isinstance(loaded, dict):
        raise VaultError("invalid_request", f"{what}: unexpected answer from Vault")
    return loaded


# --- tokens --------------------------------------------------------------------------------

_approle_lock = threading.Lock()
_approle_token: dict[str, Any] = {}  # {"token": str, "expires": monotonic seconds, "key": ...}


def _addr() -> str:
    addr: str = settings.VAULT_ADDR
    if not addr:
        raise VaultError("unreachable", "VAULT_ADDR is not configured")
    return addr


def _timeout() -> float:
    return float(settings.VAULT_TIMEOUT_S)


def _mount() -> str:
    return str(settings.VAULT_TRANSIT_MOUNT)


def _approle_login(addr: str, role_id: str, secret_id: str) -> str:
    key = (addr, role_id, secret_id)
    with _approle_lock:
        cached = _approle_token
        if cached.get("key") == key and cached["expires"] > time.monotonic():
            return str(cached["token"])
        client = _client(addr, None, _timeout())
        answer = _json(
            _call(
                "AppRole login",
                lambda: client.adapter.post(
                    "/v1/auth/approle/login", json={"role_id": role_id, "secret_id": secret_id}
                ),
            ),
            "AppRole login",
        )
        auth = answer.get("auth") or {}
        token = str(auth.get("client_token", ""))
        if not token:
            raise VaultError("permission_denied", "AppRole login returned no token")
        ttl = float(auth.get("lease_duration") or 0) or 3600.0
        # Log in again well before the token expires.
        _approle_token.update(token=token, expires=time.monotonic() + ttl * 0.8, key=key)
        return token


def _app_token() -> str:
    token: str = settings.VAULT_TOKEN
    if token:
        return token
    role_id, secret_id = settings.VAULT_ROLE_ID, settings.VAULT_SECRET_ID
    if role_id and secret_id:
        return _approle_login(_addr(), role_id, secret_id)
    raise VaultError(
        "permission_denied", "no Vault credentials: set VAULT_TOKEN or VAULT_ROLE_ID/SECRET_ID"
    )


# Periodic tokens die unless renewed: a long-running process renews the static tokens it
# uses every RENEW_EVERY_S, counted from the first time it used each one (the runner
# renews them at start, so the first use needs no extra call).
RENEW_EVERY_S = 12 * 3600
_renewed_at: dict[tuple[str, str], float] = {}
_renew_lock = threading.Lock()


def _keep_renewed(addr: str, token: str) -> None:
    now = time.monotonic()
    with _renew_lock:
        last = _renewed_at.setdefault((addr, token), now)
        if now - last < RENEW_EVERY_S:
            return
        _renewed_at[(addr, token)] = now
    try:
        token_renew(addr, token, timeout_s=_timeout())
    except VaultError as exc:
        # The call that follows reports a dead token; a failed renewal alone is no error.
        logger.warning("Vault token renewal failed: %s", exc.reason)


def _app() -> hvac.Client:
    addr, token = _addr(), _app_token()
    if settings.VAULT_TOKEN:
        _keep_renewed(addr, token)
    return _client(addr, token, _timeout())


def _app_call(what: str, op: Callable[[hvac.Client], T]) -> T:
    """Run ``op`` with the app client; an AppRole token the server no longer accepts
    (expired, revoked) is replaced by a fresh login and ``op`` retried once."""
    try:
        return _call(what, lambda: op(_app()))
    except VaultError as exc:
        approle = not settings.VAULT_TOKEN and bool(settings.VAULT_ROLE_ID)
        if exc.reason != "permission_denied" or not approle:
            raise
        with _approle_lock:
            _approle_token.clear()
        return _call(what, lambda: op(_app()))


def _admin_token() -> str:
    token: str = settings.VAULT_ADMIN_TOKEN
    path: str = settings.VAULT_ADMIN_TOKEN_FILE
    if not token and path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise VaultError(
                "permission_denied", f"VAULT_ADMIN_TOKEN_FILE={path!r} cannot be read: {exc}"
            ) from None
    if not token:
        raise VaultError("permission_denied", "VAULT_ADMIN_TOKEN is not configured")
    return token


def _admin() -> hvac.Client:
    token = _admin_token()
    _keep_renewed(_addr(), token)
    return _client(_addr(), token, _timeout())


def renew_token(*, admin: bool = False) -> int:
    """Renew the app token (or the admin token) and return its new TTL in seconds.

    With AppRole credentials instead of a token, a fresh login replaces the cached token.

    Raises:
        VaultError: the token is invalid or expired (``permission_denied``), or Vault is
            unreachable/sealed/slow.
    """
    if not admin and not settings.VAULT_TOKEN and settings.VAULT_ROLE_ID:
        with _approle_lock:
            _approle_token.clear()
        client = _app()
        answer = _json(
            _call("token lookup", lambda: client.adapter.get("/v1/auth/token/lookup-self")),
            "token lookup",
        )
        return int((answer.get("data") or {}).get("ttl") or 0)
    client = _admin() if admin else _app()
    answer = _json(
        _call("token renewal", lambda: client.adapter.post("/v1/auth/token/renew-self", json={})),
        "token renewal",
    )
    return int((answer.get("auth") or {}).get("lease_duration") or 0)


# --- names ---------------------------------------------------------------------------------


def user_key_name(user_id: int | str) -> str:
    """The transit key of a user: ``user-<id>``."""
    return f"user-{user_id}"


def instance_key_name(instance_id: int | str) -> str:
    """The transit key of an instance (its secrets and channel credentials)."""
    return f"instance-{instance_id}"


# --- transit with the app token ------------------------------------------------------------


def _batch_results(answer: dict[str, Any], what: str, expected: int) -> list[dict[str, Any]]:
    results = (answer.get("data") or {}).get("batch_results") or []
    if len(results) != expected:
        raise VaultError("invalid_request", f"{what}: Vault answered {len(results)} of {expected}")
    for item in results:
        if item.get("error"):
            reason = (
                "not_found" if _means_missing(str(item["error"]).lower()) else "invalid_request"
            )
            raise VaultError(reason, f"{what}: {item['error']}")
    return list(results)


def _transit_batch(
    what: str,
    path: str,
    items: list[dict[str, str]],
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    payload = {"batch_input": items, **(extra or {})}

    def post(client: hvac.Client) -> Any:
        # Vault answers 400 with per-item errors when an item of a batch fails.
        response = client.adapter.post(path, json=payload, raise_exception=False)
        if isinstance(response, dict):
            return response
        try:
            body = response.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and (body.get("data") or {}).get("batch_results"):
            return body
        hvac.utils.raise_for_error(
            "POST", path, response.status_code, errors=body.get("errors"), text=response.text
        )
        return body

    return _batch_results(_json(_app_call(what, post), what), what, len(items))


def encrypt(key_name: str, plaintexts: list[bytes], *, context: bytes | None = None) -> list[str]:
    """Encrypt each plaintext under transit key ``key_name`` in ONE Vault call.

    Returns the ciphertexts (``vault:v<N>:...``) in input order; ``[]`` for ``[]`` without
    calling Vault. ``context`` selects the derived key (``DEFAULT_CONTEXT`` when None).

    Raises:
        VaultError: ``not_found`` when the key does not exist, ``permission_denied``,
            ``unreachable``, ``sealed``, ``timeout``.
    """
    if not plaintexts:
        return []
    ctx = _b64(context or DEFAULT_CONTEXT)
    items = [{"plaintext": _b64(p), "context": ctx} for p in plaintexts]
    path = f"/v1/{_mount()}/encrypt/{key_name}"
    results = _transit_batch(f"encrypt with {key_name}", path, items)
    return [str(r["ciphertext"]) for r in results]


def decrypt(key_name: str, ciphertexts: list[str], *, context: bytes | None = None) -> list[bytes]:
    """Decrypt transit ciphertexts of ``key_name`` in ONE Vault call (input order).

    Raises:
        VaultError: ``not_found`` when the key was deleted, ``invalid_request`` when a
            ciphertext is malformed, tampered or from another key/context, and the
            transport reasons.
    """
    if not ciphertexts:
        return []
    ctx = _b64(context or DEFAULT_CONTEXT)
    items = [{"ciphertext": c, "context": ctx} for c in ciphertexts]
    path = f"/v1/{_mount()}/decrypt/{key_name}"
    results = _transit_batch(f"decrypt with {key_name}", path, items)
    return [_unb64(str(r.get("plaintext") or "")) for r in results]


def rewrap(key_name: str, ciphertexts: list[str], *, context: bytes | None = None) -> list[str]:
    """Re-encrypt ciphertexts under the latest version of ``key_name`` (one Vault call).

    Raises:
        VaultError: as :func:`decrypt`.
    """
    if not ciphertexts:
        return []
    ctx = _b64(context or DEFAULT_CONTEXT)
    items = [{"ciphertext": c, "context": ctx} for c in ciphertexts]
    path = f"/v1/{_mount()}/rewrap/{key_name}"
    results = _transit_batch(f"rewrap with {key_name}", path, items)
    return [str(r["ciphertext"]) for r in results]


def hmac(key_name: str, inputs: list[bytes], *, key_version: int | None = None) -> list[bytes]:
    """HMAC-SHA-256 of each input with ``key_name``'s HMAC key, in ONE Vault call.

    ``key_version`` pins the key version (results then survive rotations); None uses the
    latest. Returns the raw 32-byte MACs in input order.

    Raises:
        VaultError: ``not_found`` when the key does not exist, transport reasons.
    """
    if not inputs:
        return []
    items = [{"input": _b64(i)} for i in inputs]
    extra = {"key_version": key_version} if key_version is not None else None
    path = f"/v1/{_mount()}/hmac/{key_name}/sha2-256"
    results = _transit_batch(f"hmac with {key_name}", path, items, extra)
    return [_unb64(str(r["hmac"]).rsplit(":", 1)[-1]) for r in results]


# Plaintext data keys by (addr, key name, context, wrapped form) -> (key, expiry monotonic s).
_data_keys: dict[tuple[str, str, bytes, str], tuple[bytes, float]] = {}
_data_keys_lock = threading.Lock()


def _remember_data_key(key_name: str, context: bytes, wrapped: str, plaintext: bytes) -> None:
    expires = time.monotonic() + float(settings.VAULT_DATA_KEY_TTL_S)
    with _data_keys_lock:
        _data_keys[(_addr(), key_name, context, wrapped)] = (plaintext, expires)


def cached_data_key(key_name: str, wrapped: str, *, context: bytes) -> bytes | None:
    """The plaintext of a wrapped data key if this process holds it unexpired, else None.

    Never calls Vault (async callers use it to stay on the event loop when warm).
    """
    key = (settings.VAULT_ADDR, key_name, context, wrapped)
    with _data_keys_lock:
        hit = _data_keys.get(key)
        if hit is None:
            return None
        if hit[1] <= time.monotonic():
            del _data_keys[key]
            return None
        return hit[0]


def forget_data_keys(key_name: str | None = None) -> int:
    """Drop this process's plaintext data keys of ``key_name`` (all keys when None).

    Returns how many were dropped.
    """
    with _data_keys_lock:
        doomed = [k for k in _data_keys if key_name is None or k[1] == key_name]
        for k in doomed:
            del _data_keys[k]
    return len(doomed)


def generate_data_key(key_name: str, *, context: bytes) -> tuple[bytes, str]:
    """A new 32-byte data key from transit ``datakey``: (plaintext, wrapped).

    The plaintext is remembered in memory (``VAULT_DATA_KEY_TTL_S``) so decrypting the
    wrapped form later in this process costs no Vault call.

    Raises:
        VaultError: ``not_found`` when the key does not exist, and the transport reasons.
    """
    what = f"data key from {key_name}"
    answer = _json(
        _app_call(
            what,
            lambda client: client.adapter.post(
                f"/v1/{_mount()}/datakey/plaintext/{key_name}",
                json={"context": _b64(context), "bits": 256},
            ),
        ),
        what,
    )
    data = answer.get("data") or {}
    plaintext, wrapped = _unb64(str(data.get("plaintext", ""))), str(data.get("ciphertext", ""))
    if len(plaintext) != 32 or not wrapped:
        raise VaultError("invalid_request", f"{what}: Vault returned no usable data key")
    _remember_data_key(key_name, context, wrapped, plaintext)
    return plaintext, wrapped


def decrypt_data_key(key_name: str, wrapped: str, *, context: bytes) -> bytes:
    """Unwrap a data key, from memory when warm (no Vault call), else one Vault call.

    Raises:
        VaultError: ``not_found`` (key deleted), ``invalid_request`` (wrong key, context
            or tampered wrapping), and the transport reasons.
    """
    hit = cached_data_key(key_name, wrapped, context=context)
    if hit is not None:
        return hit
    (plaintext,) = decrypt(key_name, [wrapped], context=context)
    if len(plaintext) != 32:
        raise VaultError("invalid_request", f"unwrapping a data key of {key_name}: bad length")
    _remember_data_key(key_name, context, wrapped, plaintext)
    return plaintext


async def aencrypt(
    key_name: str, plaintexts: list[bytes], *, context: bytes | None = None
) -> list[str]:
    """Async twin of :func:`encrypt` (runs off the event loop)."""
    return await sync_to_async(encrypt, thread_sensitive=False)(
        key_name, plaintexts, context=context
    )


async def adecrypt(
    key_name: str, ciphertexts: list[str], *, context: bytes | None = None
) -> list[bytes]:
    """Async twin of :func:`decrypt`."""
    return await sync_to_async(decrypt, thread_sensitive=False)(
        key_name, ciphertexts, context=context
    )


async def agenerate_data_key(key_name: str, *, context: bytes) -> tuple[bytes, str]:
    """Async twin of :func:`generate_data_key`."""
    return await sync_to_async(generate_data_key, thread_sensitive=False)(key_name, context=context)


async def adecrypt_data_key(key_name: str, wrapped: str, *, context: bytes) -> bytes:
    """Async twin of :func:`decrypt_data_key`; stays on the loop when the key is warm."""
    hit = cached_data_key(key_name, wrapped, context=context)
    if hit is not None:
        return hit
    return await sync_to_async(decrypt_data_key, thread_sensitive=False)(
        key_name, wrapped, context=context
    )


# --- key management with the admin token ---------------------------------------------------


def ensure_key(key_name: str) -> None:
    """Create transit key ``key_name`` (aes256-gcm96, derived, deletable) if it is missing.

    Idempotent: an existing key is left as it is (apart from allowing deletion). Uses the
    app token, whose policy allows exactly this kind of key.

    Raises:
        VaultError: ``permission_denied`` with an app token whose policy predates key
            creation (``bootstrap`` writes the current one), transport reasons.
    """
    path = f"/v1/{_mount()}/keys/{key_name}"
    _app_call(
        f"create key {key_name}",
        lambda client: client.adapter.post(path, json={"type": "aes256-gcm96", "derived": True}),
    )
    _app_call(
        f"configure key {key_name}",
        lambda client: client.adapter.post(f"{path}/config", json={"deletion_allowed": True}),
    )


def key_latest_version(key_name: str) -> int:
    """The latest version of transit key ``key_name`` (app token).

    Raises:
        VaultError: ``not_found`` when the key does not exist, transport reasons.
    """
    what = f"read key {key_name}"
    answer = _json(
        _app_call(what, lambda client: client.adapter.get(f"/v1/{_mount()}/keys/{key_name}")),
        what,
    )
    return int((answer.get("data") or {}).get("latest_version") or 0)


def rotate_key(key_name: str) -> int:
    """Rotate ``key_name`` and return its new version; old ciphertexts stay readable.

    Raises:
        VaultError: ``not_found`` when the key does not exist, transport reasons.
    """
    client = _admin()
    what = f"rotate key {key_name}"
    answer = _json(
        _call(what, lambda: client.adapter.post(f"/v1/{_mount()}/keys/{key_name}/rotate")), what
    )
    version = (answer.get("data") or {}).get("latest_version")
    return int(version) if version else key_latest_version(key_name)


def delete_key(key_name: str) -> None:
    """Delete ``key_name`` for good (crypto-shred, app token); a missing key is fine.

    Also drops this process's plaintext data keys of that key. Other processes drop
    theirs within ``VAULT_DATA_KEY_TTL_S``.

    Raises:
        VaultError: ``permission_denied``, transport reasons.
    """
    path = f"/v1/{_mount()}/keys/{key_name}"
    forget_data_keys(key_name)
    try:
        _app_call(
            f"configure key {key_name}",
            lambda client: client.adapter.post(f"{path}/config", json={"deletion_allowed": True}),
        )
    except VaultError as exc:
        if exc.reason == "not_found":
            return
        raise
    _app_call(f"delete key {key_name}", lambda client: client.adapter.delete(path))
    forget_data_keys(key_name)


async def aensure_key(key_name: str) -> None:
    """Async twin of :func:`ensure_key`."""
    await sync_to_async(ensure_key, thread_sensitive=False)(key_name)


# --- health --------------------------------------------------------------------------------


def health(*, timeout_s: float | None = None) -> dict[str, Any]:
    """Whether Vault is usable: reachable, initialised, unsealed, and the app token valid.

    Returns ``{"status": "up" | "down", "reason": str | None}``; never raises. At most two
    requests, each bounded by ``timeout_s`` (default ``VAULT_TIMEOUT_S``).
    """
    timeout = timeout_s if timeout_s is not None else _timeout()
    try:
        status = server_status(_addr(), timeout_s=timeout)
        if not status["initialized"]:
            return {"status": "down", "reason": "Vault is not initialised"}
        if status["sealed"]:
            return {"status": "down", "reason": "Vault is sealed"}
        client = _client(_addr(), _app_token(), timeout)
        _call("token lookup", lambda: client.adapter.get("/v1/auth/token/lookup-self"))
    except VaultError as exc:
        return {"status": "down", "reason": f"{exc.reason}: {exc}"}
    return {"status": "up", "reason": None}


# --- server administration (explicit address and token; no Django settings) -----------------


def server_status(addr: str, *, timeout_s: float = 5.0) -> dict[str, bool]:
    """``{"initialized": bool, "sealed": bool}`` from the unauthenticated seal status.

    Raises:
        VaultError: ``unreachable`` / ``timeout``.
    """
    client = _client(addr, None, timeout_s)
    answer = _json(
        _call("seal status", lambda: client.adapter.get("/v1/sys/seal-status")), "seal status"
    )
    return {"initialized": bool(answer.get("initialized")), "sealed": bool(answer.get("sealed"))}


def server_active(addr: str, *, timeout_s: float = 5.0) -> bool:
    """True when the server is initialised, unsealed and active (``sys/health`` 200)."""
    client = _client(addr, None, timeout_s)
    try:
        response = _call(
            "health",
            lambda: client.adapter.get("/v1/sys/health", raise_exception=False),
        )
    except VaultError:
        return False
    return isinstance(response, dict) or getattr(response, "status_code", 0) == 200


def server_initialize(addr: str, *, timeout_s: float = 60.0) -> dict[str, str]:
    """Initialise a new server with one unseal key share (threshold 1).

    Returns ``{"unseal_key": base64, "root_token": str}``.

    Raises:
        VaultError: ``invalid_request`` when it is already initialised, transport reasons.
    """
    client = _client(addr, None, timeout_s)
    answer = _json(
        _call(
            "initialise",
            lambda: client.adapter.put(
                "/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}
            ),
        ),
        "initialise",
    )
    return {"unseal_key": str(answer["keys_base64"][0]), "root_token": str(answer["root_token"])}


def server_unseal(addr: str, unseal_key: str, *, timeout_s: float = 10.0) -> bool:
    """Submit the unseal key; returns True when the server is now unsealed.

    Raises:
        VaultError: ``invalid_request`` for a wrong key, transport reasons.
    """
    client = _client(addr, None, timeout_s)
    answer = _json(
        _call("unseal", lambda: client.adapter.put("/v1/sys/unseal", json={"key": unseal_key})),
        "unseal",
    )
    return not answer.get("sealed", True)


def server_seal(addr: str, token: str, *, timeout_s: float = 10.0) -> None:
    """Seal the server (needs a token with ``sudo`` on ``sys/seal``: root or admin).

    Raises:
        VaultError: ``permission_denied``, transport reasons.
    """
    client = _client(addr, token, timeout_s)
    _call("seal", lambda: client.adapter.put("/v1/sys/seal"))


def token_valid(addr: str, token: str, *, timeout_s: float = 5.0) -> bool:
    """True when ``token`` is accepted by the server (lookup-self).

    Raises:
        VaultError: ``unreachable`` / ``sealed`` / ``timeout`` (an invalid token is False).
    """
    client = _client(addr, token, timeout_s)
    try:
        _call("token lookup", lambda: client.adapter.get("/v1/auth/token/lookup-self"))
    except VaultError as exc:
        if exc.reason == "permission_denied":
            return False
        raise
    return True


def token_renew(addr: str, token: str, *, timeout_s: float = 5.0) -> int:
    """Renew ``token`` (renew-self) and return its TTL in seconds.

    Raises:
        VaultError: ``permission_denied`` for an invalid token, transport reasons.
    """
    client = _client(addr, token, timeout_s)
    answer = _json(
        _call("token renewal", lambda: client.adapter.post("/v1/auth/token/renew-self", json={})),
        "token renewal",
    )
    return int((answer.get("auth") or {}).get("lease_duration") or 0)


def token_revoke_self(addr: str, token: str, *, timeout_s: float = 10.0) -> None:
    """Revoke ``token`` itself (the runner revokes its root token after set-up).

    Raises:
        VaultError: transport reasons; an already invalid token is ``permission_denied``.
    """
    client = _client(addr, token, timeout_s)
    _call("token revocation", lambda: client.adapter.post("/v1/auth/token/revoke-self"))


def _app_policy(mount: str) -> str:
    return f"""
# OpenMates application token: use transit keys; create and delete (crypto-shred) the
# per-user and per-instance ones, of exactly OpenMates' kind. "+" is one path segment, so
# nothing below a key (rotate, trim, import) matches; only "deletion_allowed = true" may
# be configured (never min_decryption_version or exportable).
path "{mount}/keys/+" {{
  capabilities = ["create", "read", "update", "delete"]
  allowed_parameters = {{ "type" = ["aes256-gcm96"], "derived" = [true] }}
}}
path "{mount}/keys/+/config" {{
  capabilities = ["update"]
  allowed_parameters = {{ "deletion_allowed" = [true] }}
}}
path "{mount}/encrypt/*" {{ capabilities = ["update"] }}
path "{mount}/decrypt/*" {{ capabilities = ["update"] }}
path "{mount}/datakey/*" {{ capabilities = ["update"] }}
path "{mount}/rewrap/*" {{ capabilities = ["update"] }}
# Stable per-user secrets (the memory blind index): HMAC of a fixed label.
path "{mount}/hmac/*" {{ capabilities = ["update"] }}
path "auth/token/lookup-self" {{ capabilities = ["read"] }}
path "auth/token/renew-self" {{ capabilities = ["update"] }}
path "auth/token/revoke-self" {{ capabilities = ["update"] }}
"""


def _admin_policy(mount: str) -> str:
    return f"""
# OpenMates key management: create, rotate, configure and delete transit keys.
path "{mount}/keys" {{ capabilities = ["list"] }}
path "{mount}/keys/*" {{ capabilities = ["create", "read", "update", "delete", "list"] }}
path "{mount}/rewrap/*" {{ capabilities = ["update"] }}
# Mint app credentials for new deployments.
path "auth/token/create/{APP_ROLE}" {{ capabilities = ["update"] }}
path "auth/approle/role/{APP_ROLE}/role-id" {{ capabilities = ["read"] }}
path "auth/approle/role/{APP_ROLE}/secret-id" {{ capabilities = ["update"] }}
# The embedded runner seals its server on request and backs up its raft storage.
path "sys/seal" {{ capabilities = ["update", "sudo"] }}
path "sys/storage/raft/snapshot" {{ capabilities = ["read", "sudo"] }}
# `manage.py backup` takes a raft snapshot of the embedded server.
path "sys/storage/raft/snapshot" {{ capabilities = ["read"] }}
path "auth/token/lookup-self" {{ capabilities = ["read"] }}
path "auth/token/renew-self" {{ capabilities = ["update"] }}
path "auth/token/revoke-self" {{ capabilities = ["update"] }}
"""


def _policies(mount: str) -> dict[str, str]:
    return {APP_POLICY: _app_policy(mount), ADMIN_POLICY: _admin_policy(mount)}


def policies_digest(mount: str = "transit") -> str:
    """SHA-256 (hex) of the policies :func:`write_policies` writes for ``mount``.

    The embedded runner stores it to tell when a server's policies are out of date.
    """
    text = "\n".join(f"{name}\n{body}" for name, body in sorted(_policies(mount).items()))
    return hashlib.sha256(text.encode()).hexdigest()


def write_policies(
    addr: str, root_token: str, *, mount: str = "transit", timeout_s: float = 30.0
) -> None:
    """Write (or replace) the app and admin policies; tokens holding them follow at once.

    Raises:
        VaultError: the token may not write policies, transport reasons.
    """
    api = _client(addr, root_token, timeout_s).adapter
    _call(
        "write policies",
        lambda: [
            api.put(f"/v1/sys/policies/acl/{name}", json={"policy": text})
            for name, text in _policies(mount).items()
        ],
    )


def server_generate_root(addr: str, unseal_key: str, *, timeout_s: float = 30.0) -> str:
    """A new root token, generated with the unseal key (a server with one key share).

    The server must allow root generation without a token (the embedded runner opens it
    for one start: ``disable_unauthed_generate_root_endpoints = false``). The caller
    revokes the token when done. An attempt left by an earlier, interrupted run is
    cancelled first.

    Raises:
        VaultError: ``invalid_request`` for a refused key or when the server does not allow
            root generation, transport reasons.
    """
    api = _client(addr, None, timeout_s).adapter
    what = "generate a root token"
    _call(what, lambda: api.delete("/v1/sys/generate-root/attempt"))
    attempt = _json(_call(what, lambda: api.put("/v1/sys/generate-root/attempt", json={})), what)
    answer = _json(
        _call(
            what,
            lambda: api.put(
                "/v1/sys/generate-root/update",
                json={"key": unseal_key, "nonce": attempt["nonce"]},
            ),
        ),
        what,
    )
    encoded = str(answer.get("encoded_token") or "")
    if not answer.get("complete") or not encoded:
        raise VaultError("invalid_request", f"{what}: the unseal key did not complete it")
    # The token comes XOR-ed with the one-time password the attempt returned.
    masked = base64.b64decode(encoded + "=" * (-len(encoded) % 4))
    return bytes(a ^ b for a, b in zip(masked, str(attempt["otp"]).encode(), strict=True)).decode()


def bootstrap(
    addr: str,
    root_token: str,
    *,
    mount: str = "transit",
    token_period: str = TOKEN_PERIOD,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Prepare a server for OpenMates with a root token; idempotent.

    Enables transit at ``mount`` and AppRole auth, writes the app and admin policies, a
    token role and an AppRole role for the app, and creates two orphan periodic tokens
    (they survive the root token's revocation and are renewable indefinitely; each
    renewal grants ``token_period`` again). A ``token_period`` longer than the server's
    token max TTL raises that max TTL to match (the embedded runner uses a long period so
    a stopped installation's tokens do not expire while it is off).

    Returns ``{"VAULT_TOKEN": app token, "VAULT_ADMIN_TOKEN": admin token}``.

    Raises:
        VaultError: the root token is refused, or the server is unreachable/sealed.
    """
    api = _client(addr, root_token, timeout_s).adapter
    _enable_backends(api, mount)
    if token_period != TOKEN_PERIOD:
        _call(
            "tune token max TTL",
            lambda: api.post("/v1/sys/auth/token/tune", json={"max_lease_ttl": token_period}),
        )
    write_policies(addr, root_token, mount=mount, timeout_s=timeout_s)
    _write_app_roles(api, token_period)
    return {
        "VAULT_TOKEN": _create_app_token(api),
        "VAULT_ADMIN_TOKEN": _create_admin_token(api, token_period),
    }


def _enable_backends(api: Any, mount: str) -> None:
    """Enable the transit engine at ``mount`` and AppRole auth, each unless already on."""
    mounts = _json(_call("list mounts", lambda: api.get("/v1/sys/mounts")), "list mounts")
    if f"{mount}/" not in (mounts.get("data") or mounts):
        _call(
            "enable transit", lambda: api.post(f"/v1/sys/mounts/{mount}", json={"type": "transit"})
        )
    auths = _json(_call("list auth", lambda: api.get("/v1/sys/auth")), "list auth")
    if "approle/" not in (auths.get("data") or auths):
        _call("enable approle", lambda: api.post("/v1/sys/auth/approle", json={"type": "approle"}))


def _write_app_roles(api: Any, token_period: str) -> None:
    """Write the app's token role (orphan periodic tokens) and its AppRole role."""
    _call(
        "write token role",
        lambda: api.post(
            f"/v1/auth/token/roles/{APP_ROLE}",
            json={
                "allowed_policies": [APP_POLICY],
                "orphan": True,
                "token_period": token_period,
                "renewable": True,
                "token_no_default_policy": True,
            },
        ),
    )
    _call(
        "write approle role",
        lambda: api.post(
            f"/v1/auth/approle/role/{APP_ROLE}",
            json={
                "token_policies": [APP_POLICY],
                "token_no_default_policy": True,
                "token_ttl": "1h",
                "token_max_ttl": "24h",
                "secret_id_ttl": "0",
            },
        ),
    )


def _create_app_token(api: Any) -> str:
    """A new app token from the app's token role (its period, orphan, app policy only)."""
    what = "create app token"
    created = _json(
        _call(
            what,
            lambda: api.post(
                f"/v1/auth/token/create/{APP_ROLE}",
                json={"policies": [APP_POLICY], "display_name": "openmates-app"},
            ),
        ),
        what,
    )
    return str(created["auth"]["client_token"])


def _create_admin_token(api: Any, token_period: str) -> str:
    """A new orphan periodic token holding the admin policy only."""
    what = "create admin token"
    created = _json(
        _call(
            what,
            lambda: api.post(
                "/v1/auth/token/create-orphan",
                json={
                    "policies": [ADMIN_POLICY],
                    "no_default_policy": True,
                    "period": token_period,
                    "renewable": True,
                    "display_name": "openmates-admin",
                },
            ),
        ),
        what,
    )
    return str(created["auth"]["client_token"])


def approle_credentials(addr: str, admin_token: str, *, timeout_s: float = 10.0) -> dict[str, str]:
    """A role id and a fresh secret id for the app's AppRole (needs the admin token).

    Returns ``{"VAULT_ROLE_ID": ..., "VAULT_SECRET_ID": ...}``.

    Raises:
        VaultError: ``permission_denied`` with a weaker token, transport reasons.
    """
    api = _client(addr, admin_token, timeout_s).adapter
    base = f"/v1/auth/approle/role/{APP_ROLE}"
    role = _json(_call("read role id", lambda: api.get(f"{base}/role-id")), "read role id")
    secret = _json(
        _call("create secret id", lambda: api.post(f"{base}/secret-id", json={})),
        "create secret id",
    )
    return {
        "VAULT_ROLE_ID": str(role["data"]["role_id"]),
        "VAULT_SECRET_ID": str(secret["data"]["secret_id"]),
    }
