"""InstanceTool follows an instance's skills and secrets; the pipeline reads the enabled ones."""

from __future__ import annotations

from typing import Any

import pytest

from instances.services import instance_secret_delete, instance_secret_set
from skills.models import InstanceSkill, InstanceTool, Skill, Tool
from skills.selectors import enabled_tools_for_instance, skill_prompts_for_tools
from skills.services import (
    instance_skill_disable,
    instance_skill_enable,
    instance_tools_recompute,
    skill_version_create,
    tool_context_build,
    tools_sync,
)
from tests.factories import SkillFactory, SkillVersionFactory

pytestmark = pytest.mark.django_db


def _state(instance):
    return {
        row.name: (row.enabled, row.reason)
        for row in InstanceTool.objects.filter(instance=instance)
    }


def test_new_instance_has_default_skills_and_offline_tools_on(instance):
    enabled = set(
        InstanceSkill.objects.filter(instance=instance, enabled=True).values_list(
            "skill__slug", flat=True
        )
    )
    state = _state(instance)

    assert enabled == {"math", "time", "units", "web-research", "weather", "memory"}
    assert state["calculator"] == (True, "")
    assert state["datetime_now"] == (True, "")
    assert state["memory_save"] == (True, "")
    assert state["memory_search"] == (True, "")
    assert state["unit_convert"] == (True, "")
    assert state["web_search"] == (False, InstanceTool.Reason.MISSING_SECRET)
    assert state["weather"] == (False, InstanceTool.Reason.MISSING_SECRET)
    assert [s.name for s in enabled_tools_for_instance(instance)] == [
        "calculator",
        "datetime_now",
        "memory_save",
        "memory_search",
        "unit_convert",
    ]


def test_adding_and_removing_a_required_secret_turns_the_tool_on_and_off(instance):
    instance_secret_set(instance=instance, name="TAVILY_API_KEY", value="tvly-123")

    assert _state(instance)["web_search"] == (True, "")
    assert "web_search" in [s.name for s in enabled_tools_for_instance(instance)]

    instance_secret_delete(instance=instance, name="TAVILY_API_KEY")

    row = InstanceTool.objects.get(instance=instance, name="web_search")
    assert (row.enabled, row.reason) == (False, InstanceTool.Reason.MISSING_SECRET)
    assert row.detail == "missing secret: TAVILY_API_KEY"


def test_enabling_and_disabling_a_skill_changes_the_tools(instance):
    math = Skill.objects.get(slug="math")

    instance_skill_disable(instance=instance, skill=math)

    row = InstanceTool.objects.get(instance=instance, name="calculator")
    assert (row.enabled, row.reason) == (False, InstanceTool.Reason.NO_SKILL)
    assert "calculator" not in [s.name for s in enabled_tools_for_instance(instance)]

    instance_skill_enable(instance=instance, skill=math)

    row = InstanceTool.objects.get(instance=instance, name="calculator")
    assert (row.enabled, row.reason, row.skills) == (True, "", ["math"])


def test_a_skill_naming_an_unregistered_tool_shows_why(instance):
    version: Any = SkillVersionFactory(tool_names=["teleport", "calculator"])

    instance_skill_enable(instance=instance, skill=version.skill)

    state = _state(instance)
    assert state["teleport"] == (False, InstanceTool.Reason.NOT_REGISTERED)
    assert state["calculator"] == (True, "")
    row = InstanceTool.objects.get(instance=instance, name="calculator")
    assert row.skills == sorted(["math", version.skill.slug])


def test_enabling_a_newer_version_uses_its_tools(instance):
    skill: Any = SkillFactory(slug="clock")
    SkillVersionFactory(skill=skill, version=1, tool_names=[])
    v2 = skill_version_create(skill=skill, description="v2", tool_names=["datetime_now"])
    instance_skill_disable(instance=instance, skill=Skill.objects.get(slug="time"))

    instance_skill_enable(instance=instance, skill=skill)

    assert v2.version == 2
    assert InstanceSkill.objects.get(instance=instance, skill=skill).version == v2
    assert _state(instance)["datetime_now"] == (True, "")


def test_recompute_is_scoped_to_one_instance(instance, other_instance):
    instance_secret_set(instance=instance, name="OPENWEATHERMAP_API_KEY", value="owm")

    assert _state(instance)["weather"] == (True, "")
    assert _state(other_instance)["weather"] == (False, InstanceTool.Reason.MISSING_SECRET)


def test_tools_sync_mirrors_the_registry(instance):
    Tool.objects.filter(name="calculator").update(description="stale")
    Tool.objects.create(name="retired_tool", description="gone", available=True)

    counts = tools_sync()

    assert counts["updated"] >= 1
    assert counts["unavailable"] == 1
    assert Tool.objects.get(name="calculator").description.startswith("Evaluate an arithmetic")
    assert Tool.objects.get(name="retired_tool").available is False
    assert instance_tools_recompute(instance=instance)


def test_skill_prompts_follow_the_selected_tools(instance):
    prompts = skill_prompts_for_tools(instance, ["calculator", "unit_convert"])

    assert [p["skill"] for p in prompts] == ["math", "units"]
    assert "calculator" in prompts[0]["instructions"]


def test_tool_context_carries_exactly_the_needed_secrets(instance):
    instance_secret_set(instance=instance, name="TAVILY_API_KEY", value="tvly-1")
    instance_secret_set(instance=instance, name="UNRELATED", value="nope")

    context = tool_context_build(
        instance=instance, user_id=7, chat_id="c1", tool_names=["web_search", "calculator"]
    )

    assert dict(context.secrets) == {"TAVILY_API_KEY": "tvly-1"}
    assert (context.instance_id, context.user_id, context.chat_id) == (instance.pk, 7, "c1")


def test_the_memory_skill_carries_the_memory_tools_and_can_be_turned_off(instance):
    memory = Skill.objects.get(slug="memory")

    assert memory.versions.get(version=1).tool_names == ["memory_search", "memory_save"]
    instance_skill_disable(instance=instance, skill=memory)

    assert _state(instance)["memory_save"] == (False, InstanceTool.Reason.NO_SKILL)
    assert _state(instance)["memory_search"] == (False, InstanceTool.Reason.NO_SKILL)
    assert "memory_search" not in [s.name for s in enabled_tools_for_instance(instance)]


def test_seeding_named_catalog_skills_adds_only_those_and_is_idempotent(db):
    from skills.catalog import catalog_seed
    from skills.models import SkillVersion

    Skill.objects.filter(slug__in=["memory", "math"]).delete()

    assert catalog_seed(Skill, SkillVersion, slugs=["memory"]) == 1
    assert catalog_seed(Skill, SkillVersion, slugs=["memory"]) == 0
    assert Skill.objects.filter(slug="memory").exists()
    assert not Skill.objects.filter(slug="math").exists()
