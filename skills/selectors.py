"""Reads for skills and tools: what an instance may run, and the instructions that go with it."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from instances.models import Instance
from skills.models import InstanceSkill, InstanceTool, SkillVersion
from skills.registry import ToolSpec, get_tool


def enabled_tools_for_instance(instance: Instance) -> list[ToolSpec]:
    """The registered tools that are on for ``instance``, by name.

    "On" means an enabled skill names the tool and every secret it needs is set (the
    ``InstanceTool`` rows, kept current by ``skills.services.instance_tools_recompute``).
    """
    names = InstanceTool.objects.filter(instance_id=instance.pk, enabled=True).values_list(
        "name", flat=True
    )
    specs = [get_tool(name) for name in sorted(names)]
    return [spec for spec in specs if spec is not None]


async def aenabled_tools_for_instance(instance: Instance) -> list[ToolSpec]:
    """Async twin of ``enabled_tools_for_instance``."""
    return await sync_to_async(enabled_tools_for_instance)(instance)


def instance_tools_get(instance: Instance) -> list[InstanceTool]:
    """Every computed tool row of ``instance`` (on and off, with reasons), by name."""
    return list(InstanceTool.objects.filter(instance_id=instance.pk).order_by("name"))


def enabled_skill_versions(instance: Instance) -> list[SkillVersion]:
    """The versions of the skills enabled for ``instance`` (``skill`` loaded), by skill name."""
    rows = (
        InstanceSkill.objects.filter(instance_id=instance.pk, enabled=True)
        .select_related("version", "version__skill")
        .order_by("skill__name")
    )
    return [row.version for row in rows]


def skill_prompts_for_tools(instance: Instance, tool_names: list[str]) -> list[dict[str, str]]:
    """Instructions of the enabled skills that name any of ``tool_names``.

    Returns ``[{"skill": slug, "name": ..., "instructions": ..., "preprocessing_hint": ...}]``
    in skill-name order; a skill appears once however many of its tools were selected.
    """
    wanted = set(tool_names)
    return [
        {
            "skill": version.skill.slug,
            "name": version.skill.name,
            "instructions": version.instructions,
            "preprocessing_hint": version.preprocessing_hint,
        }
        for version in enabled_skill_versions(instance)
        if wanted.intersection(version.tool_names)
    ]


async def askill_prompts_for_tools(
    instance: Instance, tool_names: list[str]
) -> list[dict[str, str]]:
    """Async twin of ``skill_prompts_for_tools``."""
    return await sync_to_async(skill_prompts_for_tools)(instance, tool_names)
