"""Writes for skills and tools: registry sync, per-instance enablement, derived tool rows.

``instance_tools_recompute`` is the one place that decides whether a tool is on for an
instance. It is called explicitly by every service that changes an instance's skills
here, and by the ``instances`` services that change its secrets (through
``SkillsInstanceExtension``, registered in ``SkillsConfig.ready``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from instances.extensions import ImportReport
from instances.models import Instance
from instances.selectors import instance_secret_names
from instances.services import instance_secrets_get
from openmates.db import db_call
from skills.catalog import catalog_seed
from skills.models import InstanceSkill, InstanceTool, Skill, SkillVersion, Tool
from skills.registry import ToolContext, all_tools, get_tool
from skills.selectors import aenabled_tools_for_instance, enabled_tools_for_instance

__all__ = [
    "SkillsInstanceExtension",
    "aenabled_tools_for_instance",
    "atool_context_build",
    "enabled_tools_for_instance",
    "instance_skill_disable",
    "instance_skill_enable",
    "instance_skills_seed_defaults",
    "instance_tools_recompute",
    "skill_catalog_seed",
    "skill_version_create",
    "tool_context_build",
    "tools_sync",
]


@transaction.atomic
def tools_sync() -> dict[str, int]:
    """Make the ``Tool`` rows match the code registry; recompute every instance's tools.

    Returns ``{"created": n, "updated": n, "unavailable": n}`` (``unavailable``: rows whose
    tool is no longer registered, kept with ``available=False``).
    """
    specs = {spec.name: spec for spec in all_tools()}
    existing = {tool.name: tool for tool in Tool.objects.all()}
    created = updated = 0
    for name, spec in specs.items():
        values = {
            "description": spec.description,
            "category": spec.category,
            "parameters": spec.parameters,
            "required_secrets": list(spec.required_secrets),
            "available": True,
        }
        row = existing.get(name)
        if row is None:
            Tool.objects.create(name=name, **values)
            created += 1
        elif any(getattr(row, field) != value for field, value in values.items()):
            Tool.objects.filter(pk=row.pk).update(**values)
            updated += 1
    unavailable = (
        Tool.objects.exclude(name__in=list(specs)).filter(available=True).update(available=False)
    )
    for instance in Instance.objects.all():
        instance_tools_recompute(instance=instance)
    return {"created": created, "updated": updated, "unavailable": unavailable}


def _tool_state(name: str, skills: list[str], secret_names: set[str]) -> tuple[bool, str, str]:
    spec = get_tool(name)
    if spec is None:
        return False, InstanceTool.Reason.NOT_REGISTERED, f"no tool called {name} in this build"
    if not skills:
        return False, InstanceTool.Reason.NO_SKILL, "enable a skill that uses this tool"
    missing = [secret for secret in spec.required_secrets if secret not in secret_names]
    if missing:
        return False, InstanceTool.Reason.MISSING_SECRET, "missing secret: " + ", ".join(missing)
    return True, InstanceTool.Reason.ON, ""


@transaction.atomic
def instance_tools_recompute(*, instance: Instance) -> list[InstanceTool]:
    """Rewrite ``instance``'s ``InstanceTool`` rows from its skills, secrets and the registry.

    One row per registered tool and per tool an enabled skill names: on when an enabled
    skill names it, it is registered and every secret it needs is set; otherwise off with
    a reason (``InstanceTool.Reason``) and a readable ``detail``. Returns the rows by name.
    """
    wanted: dict[str, list[str]] = {}
    enabled = InstanceSkill.objects.filter(instance=instance, enabled=True).select_related(
        "version", "skill"
    )
    for row in enabled:
        for name in row.version.tool_names:
            wanted.setdefault(str(name), []).append(row.skill.slug)
    secret_names = instance_secret_names(instance)
    names = sorted({spec.name for spec in all_tools()} | set(wanted))
    rows = []
    for name in names:
        skills = sorted(wanted.get(name, []))
        on, reason, detail = _tool_state(name, skills, secret_names)
        rows.append(
            InstanceTool(
                instance=instance,
                name=name,
                enabled=on,
                reason=reason,
                detail=detail,
                skills=skills,
            )
        )
    InstanceTool.objects.filter(instance=instance).exclude(name__in=names).delete()
    InstanceTool.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["instance", "name"],
        update_fields=["enabled", "reason", "detail", "skills", "computed_at"],
    )
    return list(InstanceTool.objects.filter(instance=instance).order_by("name"))


def _latest_version(skill: Skill) -> SkillVersion:
    version = skill.versions.order_by("-version").first()
    if version is None:
        raise ValidationError(f"skill {skill.slug!r} has no version yet")
    return version


@transaction.atomic
def instance_skill_enable(
    *, instance: Instance, skill: Skill, version: SkillVersion | None = None
) -> InstanceSkill:
    """Enable ``skill`` for ``instance`` at ``version`` (default: its latest); tools recomputed.

    Raises:
        ValidationError: the skill has no versions, or ``version`` belongs to another skill.
    """
    chosen = version or _latest_version(skill)
    if chosen.skill_id != skill.pk:
        raise ValidationError(f"{chosen} is not a version of {skill.slug}")
    row, _ = InstanceSkill.objects.update_or_create(
        instance=instance, skill=skill, defaults={"version": chosen, "enabled": True}
    )
    instance_tools_recompute(instance=instance)
    return row


@transaction.atomic
def instance_skill_disable(*, instance: Instance, skill: Skill) -> bool:
    """Disable ``skill`` for ``instance`` (the row keeps its version); tools recomputed.

    Returns whether the skill had been enabled.
    """
    changed = InstanceSkill.objects.filter(instance=instance, skill=skill, enabled=True).update(
        enabled=False
    )
    instance_tools_recompute(instance=instance)
    return changed > 0


@transaction.atomic
def instance_skills_seed_defaults(*, instance: Instance) -> list[InstanceSkill]:
    """Enable the latest version of every ``enabled_by_default`` skill; tools recomputed."""
    rows = []
    for skill in Skill.objects.filter(enabled_by_default=True).order_by("name"):
        version = skill.versions.order_by("-version").first()
        if version is not None:
            row, _ = InstanceSkill.objects.get_or_create(
                instance=instance, skill=skill, defaults={"version": version, "enabled": True}
            )
            rows.append(row)
    instance_tools_recompute(instance=instance)
    return rows


@transaction.atomic
def skill_catalog_seed() -> int:
    """Create the built-in catalog skills that are missing (idempotent); returns how many."""
    return catalog_seed(Skill, SkillVersion)


@transaction.atomic
def skill_version_create(
    *,
    skill: Skill,
    description: str,
    instructions: str = "",
    preprocessing_hint: str = "",
    tool_names: Iterable[str] = (),
) -> SkillVersion:
    """Add the next version of ``skill`` (1 for the first).

    Instances keep the version they enabled until one is chosen for them.
    """
    last = SkillVersion.objects.filter(skill=skill).aggregate(last=Max("version"))["last"] or 0
    return SkillVersion.objects.create(
        skill=skill,
        version=last + 1,
        description=description,
        instructions=instructions,
        preprocessing_hint=preprocessing_hint,
        tool_names=sorted(set(tool_names)),
    )


def tool_context_build(
    *, instance: Instance, user_id: int | None, chat_id: str | None, tool_names: Iterable[str]
) -> ToolContext:
    """A ``ToolContext`` carrying exactly the secrets the named tools need.

    Raises: as ``instances.services.instance_secrets_get`` (Vault unreachable, …).
    """
    needed = {
        secret
        for name in tool_names
        if (spec := get_tool(name)) is not None
        for secret in spec.required_secrets
    }
    secrets = instance_secrets_get(instance=instance, names=needed) if needed else {}
    return ToolContext(instance_id=instance.pk, user_id=user_id, chat_id=chat_id, secrets=secrets)


async def atool_context_build(
    *, instance: Instance, user_id: int | None, chat_id: str | None, tool_names: Iterable[str]
) -> ToolContext:
    """Async twin of ``tool_context_build`` (connection released at once)."""
    return await db_call(
        tool_context_build,
        instance=instance,
        user_id=user_id,
        chat_id=chat_id,
        tool_names=list(tool_names),
    )


class SkillsInstanceExtension:
    """The skills app's part in instance creation, configuration changes, export and import."""

    section = "skills"

    def instance_created(self, instance: Instance) -> None:
        """Enable the default skills."""
        instance_skills_seed_defaults(instance=instance)

    def instance_config_changed(self, instance: Instance) -> None:
        """Secrets or skills changed: recompute the instance's tools."""
        instance_tools_recompute(instance=instance)

    def instance_export(self, instance: Instance) -> list[dict[str, Any]]:
        """``[{"skill": slug, "version": n, "enabled": bool}]`` by skill slug."""
        rows = InstanceSkill.objects.filter(instance=instance).select_related("skill", "version")
        return sorted(
            (
                {"skill": row.skill.slug, "version": row.version.version, "enabled": row.enabled}
                for row in rows
            ),
            key=lambda item: str(item["skill"]),
        )

    def instance_import(
        self, instance: Instance, section: Any, *, overwrite: bool, report: ImportReport
    ) -> None:
        """Apply exported skill rows; a skill or version missing here is a conflict."""
        for item in section or []:
            slug, number = str(item.get("skill", "")), item.get("version")
            enabled = bool(item.get("enabled", True))
            label = f"skill {slug}"
            version = SkillVersion.objects.filter(skill__slug=slug, version=number).first()
            if version is None:
                report.conflicts.append(f"{label}: version {number} is not in this catalog")
                continue
            row = InstanceSkill.objects.filter(instance=instance, skill=version.skill).first()
            if row is None:
                InstanceSkill.objects.create(
                    instance=instance, skill=version.skill, version=version, enabled=enabled
                )
                report.created.append(label)
            elif row.version_id == version.pk and row.enabled == enabled:
                report.unchanged.append(label)
            elif overwrite:
                row.version, row.enabled = version, enabled
                row.save(update_fields=["version", "enabled", "updated_at"])
                report.updated.append(label)
            else:
                report.conflicts.append(
                    f"{label}: here v{row.version.version} enabled={row.enabled}, "
                    f"file v{number} enabled={enabled} (kept)"
                )
        instance_tools_recompute(instance=instance)
