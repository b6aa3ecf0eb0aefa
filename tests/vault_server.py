"""Starts OpenBao for the test session (filled in with the Vault seam)."""

from __future__ import annotations

from pathlib import Path


def start_dev_vault(directory: Path, cleanups: list[tuple[str, object]]) -> dict[str, str]:
    """Start ``bao server -dev`` and return the environment that points at it."""
    return {}
