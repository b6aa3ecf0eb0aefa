"""The runlocal demo account: its user can seal a turn from the first start on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from openmates import crypto, vault
from openmates.runlocal.demo import DEMO_USERNAME, demo_setup


def _forget(key_name: str) -> None:
    vault.delete_key(key_name)
    crypto.forget_key(key_name)


def test_the_demo_user_gets_its_transit_key(db: Any, tmp_path: Path) -> None:
    account = demo_setup(directory=tmp_path)
    user = get_user_model().objects.get(username=DEMO_USERNAME)
    key_name = vault.user_key_name(user.pk)
    try:
        assert account.user_created
        assert vault.key_latest_version(key_name) == 1
    finally:
        _forget(key_name)


def test_an_existing_demo_user_without_a_key_gets_one_on_the_next_start(
    db: Any, tmp_path: Path
) -> None:
    user = get_user_model().objects.create_user(username=DEMO_USERNAME, password="x" * 20)
    key_name = vault.user_key_name(user.pk)
    with pytest.raises(vault.VaultError) as missing:
        vault.key_latest_version(key_name)
    assert missing.value.reason == "not_found"
    account = demo_setup(directory=tmp_path)
    try:
        assert not account.user_created
        assert vault.key_latest_version(key_name) == 1
    finally:
        _forget(key_name)
