"""Fixtures for the Vault seam, envelope encryption, health and checks tests."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from openmates import crypto, vault
from openmates.runlocal.openbao import EmbeddedOpenBao
from tests.vault_server import start_raft_vault


@pytest.fixture
def transit_key() -> Iterator[str]:
    """A fresh transit key on the session's OpenBao, deleted afterwards."""
    name = f"user-t{uuid.uuid4().hex[:12]}"
    vault.ensure_key(name)
    yield name
    vault.delete_key(name)
    crypto.forget_key(name)


@pytest.fixture
def other_transit_key() -> Iterator[str]:
    """A second user's transit key."""
    name = f"user-t{uuid.uuid4().hex[:12]}"
    vault.ensure_key(name)
    yield name
    vault.delete_key(name)
    crypto.forget_key(name)


@pytest.fixture(scope="session")
def raft_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedOpenBao]:
    """A persistent raft OpenBao of its own (restart, seal and stop tests use it)."""
    server, _ = start_raft_vault(tmp_path_factory.mktemp("raft") / "openbao")
    yield server
    server.destroy()


def vault_settings(server_env: dict[str, str]) -> override_settings:
    """``override_settings`` pointing the Vault seam at another server."""
    return override_settings(
        VAULT_ADDR=server_env["VAULT_ADDR"],
        VAULT_TOKEN=server_env["VAULT_TOKEN"],
        VAULT_ADMIN_TOKEN=server_env["VAULT_ADMIN_TOKEN"],
    )


@pytest.fixture
def point_vault_at() -> Callable[[dict[str, str]], override_settings]:
    """``point_vault_at(env)``: a context manager that points the Vault seam at ``env``."""
    return vault_settings


@pytest.fixture
def raft_settings(raft_vault: EmbeddedOpenBao) -> Iterator[dict[str, str]]:
    """Settings pointing at the raft server (started and unsealed)."""
    if raft_vault.process is None:
        raft_vault.start()
    env = raft_vault.configure()
    with vault_settings(env):
        yield env


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections but never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
