"""Typed readers for settings that come from the environment.

Every setting in ``openmates/settings.py`` is read through these helpers, so parsing
rules are in one place: booleans are strict, secrets may come from ``<NAME>_FILE``, and
the embedded default's addresses (written by ``manage.py runlocal`` to
``<data dir>/services.json``) fill in what the environment leaves unset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ValueError):
    """An environment variable holds a value its reader cannot parse."""


def env_str(name: str, default: str = "") -> str:
    """Return ``$name`` or ``default`` when it is unset."""
    return os.environ.get(name, default)


def env_secret(name: str, default: str = "") -> str:
    """Return ``$name``, else the stripped contents of the file named by ``$name_FILE``.

    Raises:
        EnvError: ``$name_FILE`` names a file that cannot be read.
    """
    if name in os.environ:
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise EnvError(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return default


def env_bool(name: str, *, default: bool) -> bool:
    """Parse ``$name`` as a strict boolean (1/true/yes/on, 0/false/no/off).

    Raises:
        EnvError: any other value, so a typo never silently flips a switch.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, *, default: int) -> int:
    """Parse ``$name`` as an integer.

    Raises:
        EnvError: the value is not an integer.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise EnvError(f"{name}={raw!r} is not an integer") from exc


def env_float(name: str, *, default: float) -> float:
    """Parse ``$name`` as a float.

    Raises:
        EnvError: the value is not a number.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise EnvError(f"{name}={raw!r} is not a number") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """Parse ``$name`` as a comma-separated list; blank items are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_ints(name: str, *, default: tuple[int, ...]) -> tuple[int, ...]:
    """Parse ``$name`` as comma-separated positive integers, as many as ``default`` has.

    Raises:
        EnvError: an item is not a positive integer, or the count differs.
    """
    items = env_list(name)
    if not items:
        return default
    try:
        values = tuple(int(item) for item in items)
    except ValueError as exc:
        raise EnvError(f"{name}={os.environ[name]!r} is not a list of integers") from exc
    if len(values) != len(default) or min(values) < 1:
        raise EnvError(f"{name} needs {len(default)} positive integers, e.g. {default}")
    return values


def data_dir() -> Path:
    """The embedded default's data directory: ``$OPENMATES_DATA_DIR`` or ``./var``."""
    return Path(env_str("OPENMATES_DATA_DIR", "var")).resolve()


def local_services(directory: Path | None = None) -> dict[str, str]:
    """Addresses that ``runlocal`` recorded in ``<data dir>/services.json``.

    Returns an empty mapping when the file is absent or unreadable; the caller then
    falls back to its own defaults.
    """
    path = (directory or data_dir()) / "services.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def service_setting(name: str, default: str = "") -> str:
    """``$name`` when set (or ``$name_FILE``), else the embedded default's recorded value."""
    value = env_secret(name)
    if value:
        return value
    return local_services().get(name, default)
