"""Skills and tools: the global catalog and what each instance has enabled.

* ``Tool`` rows mirror the code registry (``skills.services.tools_sync``).
* ``Skill`` / ``SkillVersion`` form the global catalog, edited by superusers.
* ``InstanceSkill`` enables one version of a skill for an instance.
* ``InstanceTool`` is derived, never edited: ``instance_tools_recompute`` rewrites it
  whenever an instance's skills or secrets change, with the reason a tool is off.
"""

from __future__ import annotations

from django.db import models

from instances.models import Instance


class Tool(models.Model):
    """A tool known to the code registry (``available`` is false once it is gone)."""

    name = models.CharField(max_length=64, unique=True)
    description = models.TextField()
    category = models.CharField(max_length=64, blank=True)
    parameters = models.JSONField(default=dict)
    required_secrets = models.JSONField(default=list)
    available = models.BooleanField(default=True)
    synced_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Skill(models.Model):
    """A catalog entry; its behaviour lives in its versions."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    enabled_by_default = models.BooleanField(
        default=False, help_text="Enabled (latest version) for every new instance."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class SkillVersion(models.Model):
    """One immutable-by-convention version of a skill."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    description = models.TextField()
    instructions = models.TextField(
        blank=True, help_text="Added to the system prompt when the skill's tools are selected."
    )
    preprocessing_hint = models.TextField(
        blank=True, help_text="Tells pre-processing when the skill's tools are useful."
    )
    tool_names = models.JSONField(default=list, help_text='Tool names, e.g. ["calculator"].')
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("skill", "-version")
        constraints = [
            models.UniqueConstraint(fields=("skill", "version"), name="skill_version_unique")
        ]

    def __str__(self) -> str:
        return f"{self.skill.name} v{self.version}"


class InstanceSkill(models.Model):
    """A skill (at one version) enabled or disabled for an instance."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="skills")
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="instance_skills")
    version = models.ForeignKey(SkillVersion, on_delete=models.RESTRICT, related_name="+")
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("instance", "skill__name")
        constraints = [
            models.UniqueConstraint(fields=("instance", "skill"), name="instance_skill_unique")
        ]

    def __str__(self) -> str:
        return f"{self.instance.slug}: {self.version}"


class InstanceTool(models.Model):
    """Whether a tool is on for an instance, and if not, why (derived; see module doc)."""

    class Reason(models.TextChoices):
        ON = "", "on"
        NO_SKILL = "no_skill", "no enabled skill uses it"
        MISSING_SECRET = "missing_secret", "a required secret is not set"
        NOT_REGISTERED = "not_registered", "the tool is not registered in this build"

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64)
    enabled = models.BooleanField(default=False)
    reason = models.CharField(max_length=16, choices=Reason.choices, blank=True)
    detail = models.CharField(max_length=300, blank=True)
    skills = models.JSONField(default=list, help_text="Slugs of enabled skills naming it.")
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("instance", "name")
        constraints = [
            models.UniqueConstraint(fields=("instance", "name"), name="instance_tool_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({'on' if self.enabled else 'off'})"
