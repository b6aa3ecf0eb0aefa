"""The trusted origins follow the address runlocal serves (``--port``), not a fixed :8000.

A page served on port 8000 of the same host must not pass the CSRF check nor open a
signed-in WebSocket of a server runlocal started on port 8123.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.test import Client

from openmates.asgi import application
from openmates.runlocal.supervisor import Runner
from pipeline import runtime
from tests.pipeline.conftest import session_cookie

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "openmates" / "settings.py"
PORT = 8123
HOST = f"127.0.0.1:{PORT}"


def settings_of(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The settings module as a process with exactly ``env`` computes it."""
    with monkeypatch.context() as patch:
        for name in list(os.environ):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return runpy.run_path(str(SETTINGS_FILE))


@pytest.fixture
def served_origins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """CSRF_TRUSTED_ORIGINS of the web server ``runlocal --port 8123`` starts."""
    env = Runner(directory=tmp_path, port=PORT).child_env()
    return list(settings_of(env, monkeypatch)["CSRF_TRUSTED_ORIGINS"])


def test_the_web_servers_trusted_origins_name_the_port_it_serves(
    served_origins: list[str],
) -> None:
    assert served_origins == [f"http://{HOST}"]
    assert not any(":8000" in origin for origin in served_origins)


def test_without_a_served_address_no_other_origin_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        settings_of({"OPENMATES_DATA_DIR": str(tmp_path)}, monkeypatch)["CSRF_TRUSTED_ORIGINS"]
        == []
    )


def _sign_in_post(origin: str) -> int:
    browser = Client(enforce_csrf_checks=True, HTTP_HOST=HOST)
    browser.get("/accounts/login/")
    answer = browser.post(
        "/accounts/login/",
        {"username": "nobody", "password": "wrong", "csrfmiddlewaretoken": "x" * 64},
        HTTP_ORIGIN=origin,
    )
    answer_with_token = browser.post(
        "/accounts/login/",
        {
            "username": "nobody",
            "password": "wrong",
            "csrfmiddlewaretoken": browser.cookies["csrftoken"].value,
        },
        HTTP_ORIGIN=origin,
    )
    assert answer.status_code == 403  # a wrong token is refused whatever the origin
    return answer_with_token.status_code


@pytest.mark.django_db
def test_a_form_posted_from_another_port_fails_the_csrf_check(
    served_origins: list[str], settings: Any
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = served_origins
    assert _sign_in_post("http://127.0.0.1:8000") == 403
    # The same form from the server's own origin passes the check (the sign-in then fails).
    assert _sign_in_post(f"http://{HOST}") == 200


@pytest.fixture
async def handshake() -> AsyncIterator[Callable[..., Any]]:
    """``await handshake(origin, user)`` → ``(connected, first frame type or close code)``."""
    channel_layers.backends.clear()
    opened: list[WebsocketCommunicator] = []

    async def connect(origin: str, user: Any) -> tuple[bool, Any]:
        cookie = await sync_to_async(session_cookie)(user)
        headers = [(b"origin", origin.encode()), (b"host", HOST.encode()), (b"cookie", cookie)]
        communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        opened.append(communicator)
        connected, detail = await communicator.connect(timeout=5)
        if connected:
            detail = json.loads(await communicator.receive_from(timeout=5))["type"]
        return connected, detail

    yield connect
    for communicator in opened:
        await asyncio.wait_for(communicator.disconnect(), 20)
    await asyncio.wait_for(runtime.registry("default").stop(), 20)
    layer = channel_layers.backends.pop("default", None)
    if layer is not None:
        await layer.close_pools()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_signed_in_socket_from_another_port_is_refused(
    handshake: Any, owner: Any, served_origins: list[str], settings: Any
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = served_origins
    # Denied before accept: Daphne answers the handshake with HTTP 403.
    assert await handshake("http://127.0.0.1:8000", owner) == (False, 1000)
    assert await handshake(f"http://{HOST}", owner) == (True, "task.active")
