"""LLM fixtures and the autouse guard (listed in ``tests/conftest.py``'s pytest_plugins).

The guard, active in every test:

* points the default tiers at the scripted provider (``scripted/fast``,
  ``scripted/standard``, ``scripted/heavy``), so a call no test scripted fails the test
  (the provider records it and the guard fails at teardown) instead of reaching a model;
* refuses any socket connection outside loopback and unix sockets;
* waits for the AI call log writer to finish before the test ends.

Fixtures: ``llm_script`` (the :class:`tests.llm_fake.ScriptedProvider`, emptied per test;
``llm_script.reply(text=..., ...)`` queues an answer, ``llm_script.requests`` shows what
was sent) and ``llm_wire`` (the loopback :class:`tests.llm_fake.SSEServer`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Generator
from typing import Any

import pytest

SCRIPTED_TIERS = {tier: [{"model": f"scripted/{tier}"}] for tier in ("fast", "standard", "heavy")}

_import_thread: threading.Thread | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Import LiteLLM in the background while the database is being set up."""
    global _import_thread
    # LiteLLM's pydantic types warn on import and on use; nothing a test can act on.
    config.addinivalue_line("filterwarnings", "ignore:.*`ReadOnly` qualifier:UserWarning")
    config.addinivalue_line("filterwarnings", "ignore:Accessing the 'model_:DeprecationWarning")

    def _import() -> None:
        # Through the gateway, which sets LITELLM_LOCAL_MODEL_COST_MAP first (else LiteLLM
        # would try to fetch its price map from the network while importing).
        from openmates import llm

        llm._import_litellm()

    _import_thread = threading.Thread(target=_import, name="litellm-import-tests", daemon=True)
    _import_thread.start()


def _loopback(address: Any) -> bool:
    if isinstance(address, str | bytes):  # a unix socket path
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def llm_guard(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Generator[None, None, None]:
    """Scripted tiers, loopback-only network, unscripted calls fail the test."""
    if _import_thread is not None:
        _import_thread.join()
    from tests.llm_fake import scripted_provider

    provider = scripted_provider()
    provider.reset()
    from openmates.llm import endpoint_outcomes_forget

    # A failure an earlier test scripted must not make this test's readiness "down".
    endpoint_outcomes_forget()
    settings.LLM_DEFAULT_TIERS = SCRIPTED_TIERS
    settings.LLM_RETRY_BACKOFF_S = 0.0
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise ConnectionRefusedError(f"test network guard: {address!r} is not loopback")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if not _loopback(address):
            raise ConnectionRefusedError(f"test network guard: {address!r} is not loopback")
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield
    from openmates.llm import flush_call_log

    flush_call_log()
    if provider.unscripted:
        models = ", ".join(provider.unscripted)
        provider.reset()
        pytest.fail(f"unscripted model call(s): {models}")


@pytest.fixture
def llm_script() -> Any:
    """The scripted provider, empty at the start of the test."""
    from tests.llm_fake import scripted_provider

    return scripted_provider()


@pytest.fixture(scope="session")
def _llm_wire_server() -> Generator[Any, None, None]:
    from tests.llm_fake import SSEServer

    server = SSEServer().start()
    yield server
    server.stop()


@pytest.fixture
def llm_wire(_llm_wire_server: Any) -> Any:
    """The loopback OpenAI-format server, with no queued replies."""
    _llm_wire_server.reset()
    return _llm_wire_server
