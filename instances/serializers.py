"""Input and output serializers of the instance REST API (``instances.api``).

Output serializers render model rows; input serializers check bodies before a service
runs. Fields are the strict ones of ``openmates.rest``: text is a JSON string, a boolean
a JSON boolean and an integer a JSON integer (``42`` as text, ``"true"`` or ``1`` as a
boolean, ``"5"`` as an integer are refused, as everywhere in the API); unknown fields are
refused, so a typo never passes silently.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from instances.models import SECRET_NAME_RE, Instance, InstanceMember, Mate, PromptSection
from openmates.rest import (
    NoUnknownFields,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSlugField,
)

MAX_SECTION_CHARS = 20_000
MAX_SECRET_CHARS = 10_000


class InstanceOut(serializers.ModelSerializer):
    """An instance as every member sees it; ``role`` is the caller's."""

    role = serializers.SerializerMethodField()

    class Meta:
        model = Instance
        fields = (
            "slug",
            "name",
            "default_language",
            "role",
            "memory_enabled",
            "follow_ups_enabled",
            "model_preprocessing_enabled",
            "created_at",
            "updated_at",
        )

    def get_role(self, instance: Instance) -> str | None:
        return self.context.get("roles", {}).get(instance.pk)


class MateOut(serializers.ModelSerializer):
    """A mate as its instance's owners and admins see it, system prompt included."""

    class Meta:
        model = Mate
        fields = ("id", "category", "name", "description", "system_prompt", "is_default")


class MateMemberOut(serializers.ModelSerializer):
    """A mate as a member sees it: its system prompt is configuration, like the
    instance's prompt sections, which only owners and admins read."""

    class Meta:
        model = Mate
        fields = ("id", "category", "name", "description", "is_default")


def mate_serializer(can_administer: bool) -> type[serializers.ModelSerializer]:
    """:class:`MateOut` for an owner or admin, else :class:`MateMemberOut`."""
    return MateOut if can_administer else MateMemberOut


class MemberOut(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = InstanceMember
        fields = ("username", "role", "created_at")


class InstanceUpdateIn(NoUnknownFields):
    """``PATCH /api/instances/{slug}/``: any of these (the tier map: docs/architecture.md §3)."""

    name = StrictCharField(max_length=200, required=False)
    default_language = StrictCharField(max_length=16, required=False)
    tier_map = serializers.JSONField(required=False)
    memory_enabled = StrictBooleanField(required=False)
    follow_ups_enabled = StrictBooleanField(required=False)
    model_preprocessing_enabled = StrictBooleanField(required=False)
    api_requests_per_minute = StrictIntegerField(
        min_value=1, max_value=1_000_000, required=False, allow_null=True
    )
    api_tokens_per_day = StrictIntegerField(
        min_value=1, max_value=10**12, required=False, allow_null=True
    )
    # Tool preselection (docs/architecture.md §6); the bounds are the model field's.
    tools_offer_all_up_to = StrictIntegerField(min_value=0, max_value=5, required=False)
    model_tool_preselection = StrictBooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give at least one field")
        return attrs


class PromptSectionIn(NoUnknownFields):
    content = StrictCharField(max_length=MAX_SECTION_CHARS, allow_blank=True)


class MateIn(NoUnknownFields):
    """A mate's fields; on ``POST`` ``name`` is required, on ``PATCH`` nothing is."""

    category = StrictSlugField(max_length=64, required=False)
    name = StrictCharField(max_length=100)
    description = StrictCharField(max_length=5_000, required=False, allow_blank=True)
    system_prompt = StrictCharField(max_length=MAX_SECTION_CHARS, required=False, allow_blank=True)
    is_default = StrictBooleanField(required=False)


class SecretIn(NoUnknownFields):
    value = StrictCharField(max_length=MAX_SECRET_CHARS, trim_whitespace=False)


def section_key_valid(key: str) -> bool:
    """Whether ``key`` names one of the eight prompt sections."""
    return key in PromptSection.Key.values


def secret_name_valid(name: str) -> bool:
    """Whether ``name`` is a valid secret name (``instances.models.SECRET_NAME_RE``)."""
    return bool(SECRET_NAME_RE.match(name))
