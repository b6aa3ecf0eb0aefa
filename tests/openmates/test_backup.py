"""``manage.py backup`` / ``restore`` of the embedded data directory, on real services.

A source data directory gets a real PostgreSQL (pgvector), a persistent Redis and a raft
OpenBao, as ``runlocal`` lays them out; the backup is restored into an empty directory,
services are started there, and the row, the Redis key and the transit ciphertext are
read back.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from django.core.management import CommandError, call_command

from openmates.runlocal.backup import backup_create, backup_restore
from openmates.runlocal.openbao import EmbeddedOpenBao
from openmates.runlocal.postgres import EmbeddedPostgres
from openmates.runlocal.process import ServiceError
from openmates.runlocal.redis import EmbeddedRedis
from openmates.runlocal.supervisor import SERVICES_FILE, data_dir_lock, write_private


@dataclass
class DataDir:
    """A data directory with its three services running."""

    path: Path
    postgres: EmbeddedPostgres
    redis: EmbeddedRedis
    openbao: EmbeddedOpenBao
    env: dict[str, str]

    def stop(self) -> None:
        self.openbao.stop()
        self.redis.stop()
        self.postgres.stop()

    def destroy(self) -> None:
        self.openbao.destroy()
        self.redis.destroy()
        self.postgres.destroy()
        shutil.rmtree(self.path, ignore_errors=True)


def start_data_dir(path: Path) -> DataDir:
    """Start (initialising on first use) the embedded services of ``path``."""
    postgres = EmbeddedPostgres(path / "postgres")
    redis_server = EmbeddedRedis(path / "redis", persistent=True)
    openbao = EmbeddedOpenBao(path / "openbao", mode="raft")
    env = {"DATABASE_URL": postgres.start(), "REDIS_URL": redis_server.start()}
    openbao.start()
    env.update(openbao.configure())
    return DataDir(path, postgres, redis_server, openbao, env)


def vault_call(env: dict[str, str], token_name: str, path: str, body: dict) -> dict:
    response = httpx.post(
        f"{env['VAULT_ADDR']}/v1/{path}",
        headers={"X-Vault-Token": env[token_name]},
        json=body,
        timeout=10,
    )
    assert response.status_code in (200, 204), response.text
    return response.json() if response.content else {}


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A private temp dir outside pytest's: a concurrent pytest session re-chmods
    ``/tmp/pytest-of-<user>`` to 0700, which would lock PostgreSQL's server user out."""
    path = Path(tempfile.mkdtemp(prefix="openmates-backup-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def source(workdir: Path) -> Iterator[DataDir]:
    """A data directory holding a row (with a vector), a Redis key and a transit key."""
    data = start_data_dir(workdir / "var")
    with psycopg.connect(data.env["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("CREATE TABLE note (id int PRIMARY KEY, body text, embedding vector(3))")
        conn.execute("INSERT INTO note VALUES (1, 'kept across restores', '[1,2,3]')")
    redis.Redis.from_url(data.env["REDIS_URL"]).set("om:probe", "redis value")
    vault_call(data.env, "VAULT_ADMIN_TOKEN", "transit/keys/user-1", {"type": "aes256-gcm96"})
    (data.path / "secret_key").write_text("the secret key\n")
    yield data
    data.destroy()


def test_backup_then_restore_into_empty_dir_reproduces_the_data(
    source: DataDir, workdir: Path
) -> None:
    encrypted = vault_call(
        source.env,
        "VAULT_TOKEN",
        "transit/encrypt/user-1",
        {"plaintext": base64.b64encode(b"a memory").decode()},
    )["data"]["ciphertext"]
    # As while runlocal runs: the data dir is locked and services.json names the services.
    write_private(source.path / SERVICES_FILE, json.dumps(source.env))
    with data_dir_lock(source.path):
        manifest = backup_create(directory=source.path, destination=workdir / "backup")
    assert manifest["components"] == ["postgres", "redis", "openbao"]
    assert (workdir / "backup").stat().st_mode & 0o777 == 0o700
    assert (workdir / "backup" / "openbao" / "init.json").stat().st_mode & 0o777 == 0o600
    source.stop()

    backup_restore(source=workdir / "backup", directory=workdir / "restored")
    restored = start_data_dir(workdir / "restored")
    try:
        with psycopg.connect(restored.env["DATABASE_URL"]) as conn:
            row = conn.execute("SELECT body, embedding::text FROM note WHERE id = 1").fetchone()
        assert row == ("kept across restores", "[1,2,3]")
        client = redis.Redis.from_url(restored.env["REDIS_URL"])
        assert client.get("om:probe") == b"redis value"
        # The original tokens live in the restored storage and still work.
        assert restored.env["VAULT_TOKEN"] == source.env["VAULT_TOKEN"]
        decrypted = vault_call(
            restored.env, "VAULT_TOKEN", "transit/decrypt/user-1", {"ciphertext": encrypted}
        )["data"]["plaintext"]
        assert base64.b64decode(decrypted) == b"a memory"
        assert (workdir / "restored" / "secret_key").read_text() == "the secret key\n"
        # A restart of the restored Redis reads its append-only file.
        restored.redis.stop()
        restored.redis.start()
        assert client.get("om:probe") == b"redis value"
    finally:
        restored.destroy()


def test_backup_of_a_stopped_data_dir_starts_and_stops_the_services_itself(
    source: DataDir, workdir: Path
) -> None:
    source.stop()
    manifest = backup_create(directory=source.path, destination=workdir / "backup")
    assert manifest["components"] == ["postgres", "redis", "openbao"]
    assert (workdir / "backup" / "postgres.dump").stat().st_size > 0
    assert (workdir / "backup" / "openbao.snap").stat().st_size > 0
    assert not source.postgres.running()
    assert not source.redis.running()


def test_restore_refuses_a_data_dir_that_is_not_empty(workdir: Path) -> None:
    backup = workdir / "backup"
    backup.mkdir()
    (backup / "manifest.json").write_text(json.dumps({"format": 1, "components": []}))
    target = workdir / "var"
    target.mkdir()
    (target / "something").write_text("x")
    with pytest.raises(ServiceError, match="not empty"):
        backup_restore(source=backup, directory=target)
    with pytest.raises(CommandError, match="not empty"):
        call_command("restore", str(backup), "--data-dir", str(target))


def test_backup_refuses_a_destination_that_is_not_empty(workdir: Path) -> None:
    destination = workdir / "backup"
    destination.mkdir()
    (destination / "old").write_text("x")
    with pytest.raises(CommandError, match="not empty"):
        call_command("backup", str(destination), "--data-dir", str(workdir / "var"))
