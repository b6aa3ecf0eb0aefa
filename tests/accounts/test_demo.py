"""The runlocal demo account (accounts.demo): its user can seal a turn from the first start on."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts.demo import DEMO_INSTANCE_SLUG, DEMO_USERNAME, demo_setup
from instances.models import Instance, InstanceMember
from openmates import crypto, vault


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


def test_createdemo_makes_the_demo_once_and_prints_the_sign_in(
    db: Any, tmp_path: Path, settings: Any
) -> None:
    settings.DATA_DIR = tmp_path
    first, second = StringIO(), StringIO()

    call_command("createdemo", stdout=first)
    call_command("createdemo", stdout=second)

    user = get_user_model().objects.get(username=DEMO_USERNAME)
    key_name = vault.user_key_name(user.pk)
    try:
        password = (tmp_path / "demo_password").read_text(encoding="utf-8").strip()
        assert user.check_password(password)
        assert f"with password '{password}'" in first.getvalue()
        assert f"Demo instance '{DEMO_INSTANCE_SLUG}': created." in first.getvalue()
        assert f"Demo instance '{DEMO_INSTANCE_SLUG}': ready." in second.getvalue()
        instance = Instance.objects.get(slug=DEMO_INSTANCE_SLUG)
        owners = InstanceMember.objects.filter(instance=instance, role=InstanceMember.Role.OWNER)
        assert list(owners.values_list("user_id", flat=True)) == [user.pk]
    finally:
        _forget(key_name)
