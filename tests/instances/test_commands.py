"""createinstance, rotate_keys and sync_tools from the command line."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from instances.models import Instance, InstanceSecret
from instances.services import channel_config_set, instance_secret_get, instance_secret_set
from openmates import crypto, vault
from skills.models import InstanceTool, Tool

pytestmark = pytest.mark.django_db


def test_createinstance_seeds_everything(owner, skill_catalog, capsys):
    call_command("createinstance", "helpdesk", "Help Desk", "owner")

    instance = Instance.objects.get(slug="helpdesk")
    assert f"created instance helpdesk (id {instance.pk})" in capsys.readouterr().out
    assert instance.prompt_sections.count() == 8
    assert instance.mates.get().is_default is True
    assert InstanceTool.objects.filter(instance=instance, enabled=True).count() == 3


def test_createinstance_needs_an_existing_owner(db):
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("createinstance", "x", "X", "nobody")


def test_rotate_keys_rewraps_every_secret_and_reports_counts(instance, other_instance, capsys):
    instance_secret_set(instance=instance, name="A", value="alpha")
    instance_secret_set(instance=instance, name="B", value="beta")
    instance_secret_set(instance=other_instance, name="C", value="gamma")
    channel_config_set(instance=instance, kind="telegram", credentials={"bot_token": "t"})

    call_command("rotate_keys")

    out = capsys.readouterr().out
    assert (
        "instances: 2, keys rotated: 2, secrets rewrapped: 3, channel credentials rewrapped: 1"
        in out
    )
    for secret in InstanceSecret.objects.select_related("instance"):
        latest = vault.key_latest_version(vault.instance_key_name(secret.instance_id))
        assert latest == 2
        assert crypto.sealed_key_version(bytes(secret.sealed)) == latest
    assert instance_secret_get(instance=instance, name="A") == "alpha"
    assert instance_secret_get(instance=other_instance, name="C") == "gamma"


def test_rotate_keys_for_one_instance_and_an_unknown_slug(instance, capsys):
    instance_secret_set(instance=instance, name="A", value="alpha")

    call_command("rotate_keys", "demo")

    assert "demo: key v2, 1 secrets, 0 channel credentials rewrapped" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no such instance: nope"):
        call_command("rotate_keys", "nope")


def test_sync_tools_reports_counts(db, capsys):
    Tool.objects.filter(name="unit_convert").delete()

    call_command("sync_tools")

    assert "tools: 1 created, 0 updated, 0 no longer registered" in capsys.readouterr().out
    assert Tool.objects.get(name="unit_convert").required_secrets == []


def test_migrate_left_the_tool_rows_in_sync(db):
    # post_migrate ran tools_sync when the test database was built (or re-flushed).
    rows = dict(Tool.objects.values_list("name", "required_secrets"))

    assert rows["calculator"] == []
    assert rows["web_search"] == ["TAVILY_API_KEY"]
    assert rows["weather"] == ["OPENWEATHERMAP_API_KEY"]


def test_rotate_keys_resumes_an_interrupted_run(instance, capsys):
    instance_secret_set(instance=instance, name="A", value="alpha")
    instance_secret_set(instance=instance, name="B", value="beta")
    call_command("rotate_keys", "demo")
    InstanceSecret.objects.filter(instance=instance, name="A").update(key_version=1)
    capsys.readouterr()

    call_command("rotate_keys", "demo")

    out = capsys.readouterr().out
    assert "demo: key v2 (resumed), 1 secrets, 0 channel credentials rewrapped" in out
    assert "keys rotated: 0, secrets rewrapped: 1" in out
    assert vault.key_latest_version(vault.instance_key_name(instance.pk)) == 2


def test_import_instance_refuses_a_file_that_is_not_an_export(owner, tmp_path):
    path = tmp_path / "not-an-export.json"
    path.write_text('{"hello": "world"}')

    with pytest.raises(CommandError, match="not an instance export"):
        call_command("import_instance", str(path), "--owner", "owner")
