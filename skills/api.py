"""REST endpoints under ``/api/skills/`` (thin: authorise, call a service, render).

``GET /api/skills/`` is the global catalog (any signed-in user; each skill with its
latest version). ``GET /api/skills/instances/{slug}/`` lists an instance's skills and the
derived tool states (members; 404 for anyone else); ``PUT
/api/skills/instances/{slug}/{skill}/ {"enabled": bool, "version"?: int}`` turns a skill
on (at its latest or the given version) or off (owners and admins; 403 for members).
Errors are ``{"code", "message"}`` (docs/architecture.md §11); docs/api.md §1.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from instances.api import admin_instance_or_error, instance_or_404
from instances.models import Instance
from openmates.rest import (
    JsonOnlyApi,
    NoUnknownFields,
    StrictBooleanField,
    StrictIntegerField,
    TimestampCursorPagination,
)
from skills import selectors, services
from skills.models import InstanceSkill, Skill, SkillVersion


class SkillPagination(TimestampCursorPagination):
    ordering = ("-created_at", "-id")


class VersionOut(serializers.ModelSerializer):
    class Meta:
        model = SkillVersion
        fields = ("version", "description", "instructions", "preprocessing_hint", "tool_names")


class SkillOut(serializers.ModelSerializer):
    """A catalog skill with its latest version (``null`` while it has none)."""

    latest = serializers.SerializerMethodField()

    class Meta:
        model = Skill
        fields = ("slug", "name", "enabled_by_default", "created_at", "latest")

    def get_latest(self, skill: Skill) -> dict[str, Any] | None:
        versions = sorted(skill.versions.all(), key=lambda v: v.version)
        return dict(VersionOut(versions[-1]).data) if versions else None


class InstanceSkillIn(NoUnknownFields):
    enabled = StrictBooleanField()
    version = StrictIntegerField(min_value=1, required=False)


def instance_skills_json(instance: Instance) -> dict[str, Any]:
    """``{"skills": [{"skill", "name", "version", "enabled"}], "tools": [{"name",
    "enabled", "reason", "detail", "skills"}]}`` of one instance."""
    rows = InstanceSkill.objects.filter(instance=instance).select_related("skill", "version")
    return {
        "skills": [
            {
                "skill": row.skill.slug,
                "name": row.skill.name,
                "version": row.version.version,
                "enabled": row.enabled,
            }
            for row in rows.order_by("skill__name")
        ],
        "tools": [
            {
                "name": tool.name,
                "enabled": tool.enabled,
                "reason": tool.reason or None,
                "detail": tool.detail,
                "skills": tool.skills,
            }
            for tool in selectors.instance_tools_get(instance)
        ],
    }


class SkillCatalogApi(JsonOnlyApi):
    """GET: the skill catalog, newest first (cursor pagination)."""

    pagination_class = SkillPagination

    @extend_schema(operation_id="skills_list", responses={200: SkillOut(many=True)})
    def get(self, request: Request) -> Response:
        paginator = SkillPagination()
        rows = Skill.objects.prefetch_related("versions")
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response(SkillOut(page, many=True).data)


class InstanceSkillsApi(JsonOnlyApi):
    """GET: one instance's skills and tools (members)."""

    @extend_schema(operation_id="skills_instance_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, slug: str) -> Response:
        return Response(instance_skills_json(instance_or_404(request, slug)))


class InstanceSkillApi(JsonOnlyApi):
    """PUT ``{"enabled", "version"?}``: enable or disable a catalog skill (owners/admins);
    answers the instance's skills and tools as they now are."""

    @extend_schema(
        operation_id="skills_instance_set",
        request=InstanceSkillIn,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request, slug: str, skill: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        found = Skill.objects.filter(slug=skill).first()
        if found is None:
            raise Http404("skill not found")
        body = InstanceSkillIn(data=request.data)
        body.is_valid(raise_exception=True)
        if body.validated_data["enabled"]:
            self._enable(instance, found, body.validated_data.get("version"))
        else:
            services.instance_skill_disable(instance=instance, skill=found)
        return Response(instance_skills_json(instance))

    def _enable(self, instance: Instance, skill: Skill, number: int | None) -> None:
        version = None
        if number is not None:
            version = skill.versions.filter(version=number).first()
            if version is None:
                raise serializers.ValidationError({"version": ["no such version of this skill"]})
        try:
            services.instance_skill_enable(instance=instance, skill=skill, version=version)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"enabled": exc.messages}) from exc
