"""``/health`` and ``/health/ready`` against the real services."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from openmates import llm
from tests.vault_server import start_extra_dev_vault


@pytest.fixture
def llm_ready() -> None:
    """The LLM gateway up (LiteLLM imported; the guard's tiers need no local server)."""
    llm.start_background_import()
    deadline = time.monotonic() + 60
    while llm.health()["status"] != "up" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm.health()["status"] == "up"


def test_liveness_answers_ok(client: Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_ready_when_every_component_is_up(client: Client, llm_ready: None) -> None:
    response = client.get("/health/ready")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert body["not_ready"] == []
    assert set(body["components"]) == {"database", "redis", "vault", "llm"}
    assert all(c["status"] == "up" for c in body["components"].values())
    assert body["components"]["database"]["pgvector"].count(".") >= 1


@pytest.mark.django_db
def test_not_ready_names_vault_when_its_server_stops(
    client: Client,
    llm_ready: None,
    tmp_path: Path,
    point_vault_at: Callable[[dict[str, str]], Any],
) -> None:
    server, env = start_extra_dev_vault(tmp_path / "openbao")
    try:
        with point_vault_at(env):
            assert client.get("/health/ready").status_code == 200
            server.stop()
            started = time.monotonic()
            response = client.get("/health/ready")
            elapsed = time.monotonic() - started
    finally:
        server.destroy()
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "not_ready"
    assert body["not_ready"] == ["vault"]
    assert body["components"]["vault"]["status"] == "down"
    assert body["components"]["vault"]["reason"].startswith("unreachable")
    assert body["components"]["database"]["status"] == "up"
    assert elapsed < 3.0


@pytest.mark.django_db
def test_not_ready_when_redis_is_unreachable(
    client: Client, llm_ready: None, tmp_path: Path
) -> None:
    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"unix://{tmp_path / 'no-redis.sock'}?db=0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
        }
    }
    with override_settings(CACHES=caches):
        response = client.get("/health/ready")
    body = response.json()
    assert response.status_code == 503
    assert body["not_ready"] == ["redis"]
    assert body["components"]["vault"]["status"] == "up"


@pytest.mark.django_db
def test_silent_vault_is_cut_off_by_the_probe_timeout(
    client: Client, llm_ready: None, silent_port: int
) -> None:
    started = time.monotonic()
    with override_settings(VAULT_ADDR=f"http://127.0.0.1:{silent_port}", VAULT_TIMEOUT_S=30):
        response = client.get("/health/ready")
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert response.json()["not_ready"] == ["vault"]
    assert elapsed < 4.0
