"""Instance secrets: sealed under the instance's transit key, readable only through it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from instances.models import InstanceSecret
from instances.services import (
    ainstance_secret_get,
    ainstance_tier_secrets_get,
    instance_keys_rotate,
    instance_secret_delete,
    instance_secret_get,
    instance_secret_set,
    instance_tier_secrets_get,
)
from openmates import crypto, vault

pytestmark = pytest.mark.django_db

PLAINTEXT = "sk-live-7f3a9c1e5b2d4680"


def test_secret_column_never_holds_the_plaintext(instance):
    instance_secret_set(instance=instance, name="OPENAI_API_KEY", value=PLAINTEXT)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sealed FROM instances_instancesecret WHERE instance_id = %s", [instance.pk]
        )
        (stored,) = cursor.fetchone()
    stored = bytes(stored)
    assert PLAINTEXT.encode() not in stored
    assert PLAINTEXT.encode().hex().encode() not in stored
    assert len(stored) > len(PLAINTEXT)


def test_service_reads_the_secret_back(instance):
    instance_secret_set(instance=instance, name="OPENAI_API_KEY", value=PLAINTEXT)

    assert instance_secret_get(instance=instance, name="OPENAI_API_KEY") == PLAINTEXT
    assert instance_secret_get(instance=instance, name="MISSING") is None


@pytest.mark.django_db(transaction=True)
async def test_async_read_returns_the_same_value(instance):
    try:
        await sync_to_async(instance_secret_set)(instance=instance, name="K", value=PLAINTEXT)

        assert await ainstance_secret_get(instance=instance, name="K") == PLAINTEXT
    finally:
        # The ORM ran in asgiref's sync thread: close its connection so teardown can drop
        # the test database.
        await sync_to_async(connections.close_all)()


def test_setting_again_replaces_the_value(instance):
    instance_secret_set(instance=instance, name="K", value="first")
    instance_secret_set(instance=instance, name="K", value="second")

    assert InstanceSecret.objects.filter(instance=instance).count() == 1
    assert instance_secret_get(instance=instance, name="K") == "second"


def test_deleted_secret_reads_as_none(instance):
    instance_secret_set(instance=instance, name="K", value=PLAINTEXT)

    assert instance_secret_delete(instance=instance, name="K") is True
    assert instance_secret_get(instance=instance, name="K") is None
    assert instance_secret_delete(instance=instance, name="K") is False


def test_secret_sealed_for_one_instance_does_not_open_for_another(instance, other_instance):
    instance_secret_set(instance=instance, name="K", value=PLAINTEXT)
    row = InstanceSecret.objects.get(instance=instance, name="K")
    InstanceSecret.objects.create(
        instance=other_instance, name="K", sealed=bytes(row.sealed), key_version=1
    )

    with pytest.raises(crypto.DecryptionError):
        instance_secret_get(instance=other_instance, name="K")


def test_deleting_the_transit_key_shreds_only_that_instances_secrets(instance, other_instance):
    instance_secret_set(instance=instance, name="K", value="mine")
    instance_secret_set(instance=other_instance, name="K", value="theirs")
    key_name = vault.instance_key_name(instance.pk)

    vault.delete_key(key_name)
    crypto.forget_key(key_name)

    with pytest.raises(crypto.DecryptionError):
        instance_secret_get(instance=instance, name="K")
    assert instance_secret_get(instance=other_instance, name="K") == "theirs"


def test_rotation_rewraps_every_secret_with_the_new_key_version(instance):
    for name in ("A", "B", "C"):
        instance_secret_set(instance=instance, name=name, value=f"value-{name}")
    before = {s.name: crypto.sealed_key_version(bytes(s.sealed)) for s in instance.secrets.all()}

    report = instance_keys_rotate(instance=instance)

    latest = vault.key_latest_version(vault.instance_key_name(instance.pk))
    assert report["rotated"] is True
    assert report["key_version"] == latest == max(before.values()) + 1
    assert report["secrets_rewrapped"] == 3
    for secret in instance.secrets.all():
        assert crypto.sealed_key_version(bytes(secret.sealed)) == latest
        assert secret.key_version == latest
        assert instance_secret_get(instance=instance, name=secret.name) == f"value-{secret.name}"


def test_rotation_resumes_without_rotating_again(instance):
    instance_secret_set(instance=instance, name="A", value="a")
    instance_secret_set(instance=instance, name="B", value="b")
    first = instance_keys_rotate(instance=instance)
    # Simulate a run that stopped after rotating: one row is still wrapped with the old version.
    InstanceSecret.objects.filter(instance=instance, name="B").update(key_version=1)

    resumed = instance_keys_rotate(instance=instance)

    assert resumed["rotated"] is False
    assert resumed["key_version"] == first["key_version"]
    assert resumed["secrets_rewrapped"] == 1
    assert instance_secret_get(instance=instance, name="B") == "b"


def test_tier_secrets_are_the_set_ones_the_tier_map_names(instance):
    instance.tier_map = {
        "fast": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}],
        "heavy": [
            {"model": "anthropic/claude", "secret": "ANTHROPIC_API_KEY"},
            {"model": "openai/gpt-4o", "secret": "OPENAI_API_KEY"},
        ],
    }
    instance.save()
    instance_secret_set(instance=instance, name="OPENAI_API_KEY", value=PLAINTEXT)
    instance_secret_set(instance=instance, name="WEATHER_API_KEY", value="not for models")

    assert instance_tier_secrets_get(instance=instance) == {"OPENAI_API_KEY": PLAINTEXT}


@pytest.mark.django_db(transaction=True)
async def test_tier_secrets_async_twin_reads_the_same_and_nothing_without_names(instance):
    await sync_to_async(instance_secret_set)(
        instance=instance, name="OPENAI_API_KEY", value=PLAINTEXT
    )
    local = {"fast": [{"model": "openai/local", "api_base": "http://127.0.0.1:1/v1"}]}
    keyed = {"fast": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}]}

    instance.tier_map = local
    without = await ainstance_tier_secrets_get(instance=instance)
    instance.tier_map = keyed
    with_key = await ainstance_tier_secrets_get(instance=instance)

    assert (without, with_key) == ({}, {"OPENAI_API_KEY": PLAINTEXT})
    await sync_to_async(connections.close_all)()
