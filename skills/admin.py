"""Admin for skills and tools.

The skill catalog (Skill, SkillVersion) is global: superusers edit it, instance admins
may look. Tools mirror the code registry and are read-only. On an instance's page,
instance admins enable skill versions and see the computed tools with the reason a tool
is off; saving the page recomputes them (``instances.services.instance_config_saved``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from instances.admin import InstanceAdmin, InstanceScopedInline, administers
from skills.models import InstanceSkill, InstanceTool, Skill, SkillVersion, Tool


class SuperuserEditsMixin:
    """Instance admins may view; only superusers add, change or delete."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return administers(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, None)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)


class SkillVersionInline(SuperuserEditsMixin, admin.StackedInline):
    model = SkillVersion
    extra = 0
    fields = ("version", "description", "instructions", "preprocessing_hint", "tool_names")


@admin.register(Skill)
class SkillAdmin(SuperuserEditsMixin, admin.ModelAdmin):
    list_display = ("name", "slug", "enabled_by_default", "created_at")
    list_filter = ("enabled_by_default",)
    search_fields = ("name", "slug", "versions__description")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [SkillVersionInline]


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = ("name", "category", "available", "required_secrets", "synced_at")
    list_filter = ("category", "available")
    search_fields = ("name", "description")
    readonly_fields = (
        "name",
        "description",
        "category",
        "parameters",
        "required_secrets",
        "available",
        "synced_at",
    )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return administers(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, None)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class InstanceSkillForm(forms.ModelForm):
    class Meta:
        model = InstanceSkill
        fields = ("skill", "version", "enabled")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        skill, version = cleaned.get("skill"), cleaned.get("version")
        if skill and version and version.skill_id != skill.pk:
            self.add_error("version", f"Choose a version of {skill.name}.")
        return cleaned


class InstanceSkillInline(InstanceScopedInline, admin.TabularInline):
    model = InstanceSkill
    form = InstanceSkillForm
    fields = ("skill", "version", "enabled")

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        field = formset.form.base_fields["version"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = SkillVersion.objects.select_related("skill").order_by(
            "skill__name", "-version"
        )
        return formset


class InstanceToolInline(InstanceScopedInline, admin.TabularInline):
    """Computed, read-only: whether each tool is on and, if not, why."""

    model = InstanceTool
    fields = ("name", "enabled", "reason", "detail", "skills")
    readonly_fields = fields
    can_delete = False
    verbose_name = "computed tool"
    verbose_name_plural = "computed tools (recomputed on save)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


for _inline in (InstanceSkillInline, InstanceToolInline):
    if _inline not in InstanceAdmin.extension_inlines:
        InstanceAdmin.extension_inlines.append(_inline)
