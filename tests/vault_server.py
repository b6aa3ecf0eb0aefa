"""Starts OpenBao for the test session and for tests that stop or restart a server.

The session server (``start_dev_vault``) is ``bao server -dev`` on a free loopback port:
fast, in memory, gone at the end. Tests that restart, seal or stop a server start their
own with :func:`start_raft_vault` / :func:`start_extra_dev_vault`, so the session server
survives them.
"""

from __future__ import annotations

from pathlib import Path

from openmates.runlocal.openbao import EmbeddedOpenBao


def start_dev_vault(directory: Path, cleanups: list[tuple[str, object]]) -> dict[str, str]:
    """Start a dev OpenBao, bootstrap it, return VAULT_ADDR, VAULT_TOKEN and VAULT_ADMIN_TOKEN.

    Appends ``("openbao", server)`` to ``cleanups``; the plugin calls ``server.destroy()``.
    """
    server = EmbeddedOpenBao(directory, mode="dev")
    server.start()
    cleanups.append(("openbao", server))
    return server.configure()


def start_raft_vault(directory: Path) -> tuple[EmbeddedOpenBao, dict[str, str]]:
    """Start and configure a persistent raft OpenBao in ``directory`` (caller destroys it)."""
    server = EmbeddedOpenBao(directory, mode="raft")
    server.start()
    try:
        return server, server.configure()
    except Exception:
        server.destroy()
        raise


def start_extra_dev_vault(directory: Path) -> tuple[EmbeddedOpenBao, dict[str, str]]:
    """Start and configure another dev OpenBao (caller destroys it)."""
    server = EmbeddedOpenBao(directory, mode="dev")
    server.start()
    try:
        return server, server.configure()
    except Exception:
        server.destroy()
        raise
