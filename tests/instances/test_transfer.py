"""Export → import reproduces an instance's configuration, never its secrets."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from instances.models import ChannelConfig, Instance, Mate, PromptSection
from instances.services import (
    channel_config_set,
    instance_member_set,
    instance_secret_set,
    prompt_section_update,
)
from instances.transfer import instance_export, instance_import
from skills.models import InstanceSkill, InstanceTool, Skill
from skills.services import instance_skill_disable
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SECRET_VALUE = "sk-never-exported-42"


def _configure(instance):
    prompt_section_update(instance=instance, key="persona", content="Terse and exact.")
    Mate.objects.create(instance=instance, category="code", name="Coder", system_prompt="Code.")
    instance_member_set(instance=instance, user=UserFactory(username="alice"), role="admin")
    instance_secret_set(instance=instance, name="TAVILY_API_KEY", value=SECRET_VALUE)
    channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": "tg-token-1"}, enabled=True
    )
    instance_skill_disable(instance=instance, skill=Skill.objects.get(slug="weather"))
    instance.tier_map = {"fast": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}]}
    instance.memory_enabled = False
    instance.save()


def test_export_holds_configuration_but_no_secret_value(instance):
    _configure(instance)

    document = instance_export(instance)
    text = json.dumps(document)

    assert SECRET_VALUE not in text
    assert "tg-token-1" not in text
    assert document["secrets"] == ["TAVILY_API_KEY"]
    assert document["prompt_sections"]["persona"] == "Terse and exact."
    assert {"username": "alice", "role": "admin"} in document["members"]
    assert {"skill": "weather", "version": 1, "enabled": False} in document["skills"]
    assert document["channels"] == [{"kind": "telegram", "enabled": True}]


def test_import_into_a_fresh_database_reproduces_the_configuration(instance, owner):
    _configure(instance)
    document = instance_export(instance)
    document_again = json.loads(json.dumps(document))
    # Make the import create it anew: same document under another slug.
    document_again["instance"]["slug"] = "demo-copy"

    report = instance_import(document_again, owner=owner, with_members=True)

    copy = Instance.objects.get(slug="demo-copy")
    exported = instance_export(copy)
    for section in ("prompt_sections", "mates", "members", "skills"):
        assert exported[section] == document[section], section
    assert exported["instance"] | {"slug": "demo"} == document["instance"]
    assert exported["secrets"] == []
    assert exported["channels"] == [{"kind": "telegram", "enabled": False}]
    assert "instance demo-copy" in report.created
    assert "secret TAVILY_API_KEY: not set here; set it (values are not exported)" in (
        report.conflicts
    )
    assert "channel telegram: set its credentials, then enable it" in report.conflicts
    tools = dict(InstanceTool.objects.filter(instance=copy).values_list("name", "reason"))
    assert tools["web_search"] == InstanceTool.Reason.MISSING_SECRET
    assert tools["weather"] == InstanceTool.Reason.NO_SKILL


def test_import_is_idempotent(instance, owner):
    _configure(instance)
    document = instance_export(instance)
    document["instance"]["slug"] = "twice"
    instance_import(document, owner=owner)
    counts = (PromptSection.objects.count(), Mate.objects.count(), InstanceSkill.objects.count())

    second = instance_import(document, owner=owner)

    assert second.created == []
    assert second.updated == []
    assert counts == (
        PromptSection.objects.count(),
        Mate.objects.count(),
        InstanceSkill.objects.count(),
    )
    assert ChannelConfig.objects.filter(instance__slug="twice").count() == 1


def test_import_reports_conflicts_and_keeps_values_unless_overwriting(instance, owner):
    document = instance_export(instance)
    document["prompt_sections"]["persona"] = "From the file."
    document["instance"]["name"] = "Renamed"
    document["members"].append({"username": "ghost", "role": "member"})

    report = instance_import(document, owner=owner, with_members=True)

    assert "prompt persona: differs in content (kept)" in report.conflicts
    assert "instance demo: differs in name (kept)" in report.conflicts
    assert "member ghost: no such user here (skipped)" in report.conflicts
    assert PromptSection.objects.get(instance=instance, key="persona").content != "From the file."

    forced = instance_import(document, owner=owner, overwrite=True, with_members=True)

    assert "prompt persona" in forced.updated
    assert PromptSection.objects.get(instance=instance, key="persona").content == "From the file."
    assert Instance.objects.get(pk=instance.pk).name == "Renamed"


def test_commands_round_trip_through_a_file(instance, owner, tmp_path, capsys):
    _configure(instance)
    path = tmp_path / "demo.json"

    call_command("export_instance", "demo", "-o", str(path))
    document = json.loads(path.read_text())
    document["instance"]["slug"] = "from-file"
    path.write_text(json.dumps(document))
    call_command("import_instance", str(path), "--owner", "owner")

    out = capsys.readouterr().out
    assert SECRET_VALUE not in path.read_text()
    assert "instance from-file:" in out
    assert "conflict: secret TAVILY_API_KEY" in out
    assert Instance.objects.filter(slug="from-file").exists()
