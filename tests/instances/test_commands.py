"""createinstance, rotate_keys and sync_tools from the command line."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from instances.models import Instance, InstanceMember, InstanceSecret
from instances.services import channel_config_set, instance_secret_get, instance_secret_set
from openmates import crypto, vault
from skills.models import InstanceTool, Tool
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_createinstance_seeds_everything(owner, skill_catalog, capsys):
    call_command("createinstance", "helpdesk", "Help Desk", "owner")

    instance = Instance.objects.get(slug="helpdesk")
    assert f"created instance helpdesk (id {instance.pk})" in capsys.readouterr().out
    assert instance.prompt_sections.count() == 8
    assert instance.mates.get().is_default is True
    enabled = InstanceTool.objects.filter(instance=instance, enabled=True)
    assert sorted(enabled.values_list("name", flat=True)) == [
        "calculator",
        "datetime_now",
        "memory_save",
        "memory_search",
        "unit_convert",
    ]


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


@pytest.mark.parametrize("language", ["xx-INVALID-123", "english", "e", "en_US", "en-", "en\n"])
def test_createinstance_refuses_an_invalid_language_code(owner, language):
    with pytest.raises(CommandError, match="invalid language code"):
        call_command("createinstance", "lang", "Lang", "owner", "--language", language)

    assert not Instance.objects.filter(slug="lang").exists()


@pytest.mark.parametrize("language", ["de", "de-CH", "zh-Hant-TW", "es-419", "fil"])
def test_createinstance_accepts_bcp47_language_codes(owner, skill_catalog, language):
    call_command("createinstance", "lang", "Lang", "owner", "--language", language)

    assert Instance.objects.get(slug="lang").default_language == language


def test_export_instance_to_a_missing_directory_is_a_clear_error(instance, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "x.json"

    with pytest.raises(CommandError) as caught:
        call_command("export_instance", "demo", "-o", str(target))

    assert str(caught.value) == f"cannot write {target}: No such file or directory"


def test_backup_into_an_impossible_destination_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    with pytest.raises(CommandError) as caught:
        call_command("backup", str(blocker / "backup"), "--data-dir", str(tmp_path))

    assert str(caught.value) == f"backup failed: {blocker / 'backup'}: Not a directory"


def _import_file(tmp_path, document) -> str:
    path = tmp_path / "import.json"
    path.write_text(json.dumps(document))
    return str(path)


def _document(**changes):
    document = {
        "format": "openmates.instance/1",
        "instance": {"slug": "imported", "name": "Imported"},
    }
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mates": "string"}, "$.mates: 'string' is not of type 'array'"),
        ({"prompt_sections": [1, 2]}, "$.prompt_sections: [1, 2] is not of type 'object'"),
        ({"secrets": [{"name": "A"}]}, "$.secrets[0]: {'name': 'A'} is not of type 'string'"),
        ({"instance": None}, "$.instance: None is not of type 'object'"),
        ({"instance": {"name": "x"}}, "$.instance: 'slug' is a required property"),
        (
            {"skills": [{"skill": "weather", "version": "x"}]},
            "$.skills[0].version: 'x' is not of type 'integer'",
        ),
        ({"mates": [{"name": "A", "is_default": "yes"}]}, "$.mates[0].is_default"),
        ({"members": [{"username": "u", "role": "god"}]}, "$.members[0].role: 'god' is not one"),
        ({"mates": [{"name": "M" * 101}]}, "$.mates[0].name: 'MMMM"),
        (
            {"prompt_sections": {"persona": "a\x00b"}},
            "$.prompt_sections.persona: a NUL character or lone surrogate is not allowed",
        ),
        (
            {"mates": [{"name": "\ud800"}]},
            "$.mates[0].name: a NUL character or lone surrogate is not allowed",
        ),
    ],
)
def test_import_instance_names_the_path_of_a_malformed_field(owner, tmp_path, changes, message):
    path = _import_file(tmp_path, _document(**changes))

    with pytest.raises(CommandError) as caught:
        call_command("import_instance", path, "--owner", "owner")

    assert str(caught.value).startswith(f"{path}: {message}")
    assert not Instance.objects.filter(slug="imported").exists()


def test_import_instance_without_an_instance_key_is_a_clear_error(owner, tmp_path):
    document = _document()
    del document["instance"]
    path = _import_file(tmp_path, document)

    with pytest.raises(CommandError) as caught:
        call_command("import_instance", path, "--owner", "owner")

    assert str(caught.value) == f"{path}: $: 'instance' is a required property"


def test_import_instance_skips_members_unless_asked(owner, skill_catalog, tmp_path, capsys):
    UserFactory(username="alice")
    members = [{"username": "alice", "role": "admin"}]
    path = _import_file(tmp_path, _document(members=members))

    call_command("import_instance", path, "--owner", "owner")

    out = capsys.readouterr().out
    assert "conflict: member alice (admin): skipped; members are imported only on request" in out
    imported = Instance.objects.get(slug="imported")
    assert not InstanceMember.objects.filter(instance=imported, user__username="alice").exists()

    call_command("import_instance", path, "--owner", "owner", "--with-members")

    member = InstanceMember.objects.get(instance=imported, user__username="alice")
    assert member.role == "admin"
