"""Production mode refuses to start without its essentials (``openmates.checks``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.test import override_settings

from openmates.checks import check_production_settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": False,
    "SECRET_KEY": "a-long-random-production-secret-key-0123456789",
    "DATABASE_URL": "postgres://openmates@db/openmates",
    "VAULT_ADDR": "https://vault.internal:8200",
    "VAULT_TOKEN": "s.app",
}


def _ids(errors: list[CheckMessage]) -> list[str]:
    return [str(e.id) for e in errors if isinstance(e, Error)]


def test_development_mode_needs_nothing() -> None:
    with override_settings(DEBUG=True, SECRET_KEY=settings.DEFAULT_SECRET_KEY, VAULT_ADDR=""):
        assert check_production_settings() == []


def test_complete_production_settings_pass() -> None:
    with override_settings(**PRODUCTION):
        assert check_production_settings() == []


def test_default_secret_key_fails_in_production() -> None:
    with override_settings(**{**PRODUCTION, "SECRET_KEY": settings.DEFAULT_SECRET_KEY}):
        errors = check_production_settings()
    assert _ids(errors) == ["openmates.E001"]
    assert "SECRET_KEY" in errors[0].msg


def test_missing_database_url_and_vault_address_fail_in_production() -> None:
    with override_settings(**{**PRODUCTION, "DATABASE_URL": "", "VAULT_ADDR": ""}):
        assert _ids(check_production_settings()) == ["openmates.E002", "openmates.E003"]


def test_vault_credentials_may_be_an_approle_login() -> None:
    approle = {"VAULT_TOKEN": "", "VAULT_ROLE_ID": "role", "VAULT_SECRET_ID": "secret"}
    with override_settings(**{**PRODUCTION, **approle}):
        assert check_production_settings() == []
    with override_settings(**{**PRODUCTION, **approle, "VAULT_SECRET_ID": ""}):
        assert _ids(check_production_settings()) == ["openmates.E004"]


def test_check_deploy_refuses_the_default_key_in_production(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SECRET_KEY", "DATABASE_URL", "VAULT_", "DJANGO_SETTINGS"))
    }
    env.update(DEBUG="false", OPENMATES_DATA_DIR=str(tmp_path / "var"))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    for check_id in ("openmates.E001", "openmates.E002", "openmates.E003", "openmates.E004"):
        assert check_id in result.stderr
    assert "SECRET_KEY is missing or still the development default" in result.stderr
