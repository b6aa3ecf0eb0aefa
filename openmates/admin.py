"""Admin for the AI call log: read-only (rows are written only by ``openmates.llm``).

Latency shows as whole milliseconds with the unit, the instance by its name (looked up
through the app registry in one subquery, so ``openmates`` imports no app), a failure by
its reason (docs/protocol.md §8) and sanitised message.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest

from openmates.models import AICall


def latency_text(latency_ms: float | None) -> str:
    """``latency_ms`` as whole milliseconds with the unit (``"1106 ms"``); ``"-"`` for None."""
    if latency_ms is None:
        return "-"
    return f"{round(latency_ms):d} ms"


@admin.register(AICall)
class AICallAdmin(admin.ModelAdmin):
    """The AI call list and detail; nothing is added, changed or deleted here."""

    list_display = [
        "created_at",
        "instance",
        "stage",
        "tier",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "latency",
        "outcome",
        "error_reason",
        "error_message",
    ]
    list_filter = ["outcome", "error_reason", "kind", "stage", "tier", "provider"]
    search_fields = ["model", "chat_id", "error_class", "error_reason"]
    date_hierarchy = "created_at"
    fields = (
        "created_at",
        "instance",
        "chat_id",
        "kind",
        "stage",
        "tier",
        "provider",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "latency",
        "outcome",
        "error_reason",
        "error_message",
        "error_class",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[AICall]:
        instance_model = apps.get_model("instances", "Instance")
        names = instance_model.objects.filter(pk=OuterRef("instance_id")).values("name")[:1]
        return super().get_queryset(request).annotate(instance_name=Subquery(names))

    @admin.display(description="Instance", ordering="instance_name")
    def instance(self, obj: AICall) -> str:
        name = getattr(obj, "instance_name", None)
        if name:
            return str(name)
        return "-" if obj.instance_id is None else f"deleted instance {obj.instance_id}"

    @admin.display(description="Latency", ordering="latency_ms")
    def latency(self, obj: AICall) -> str:
        return latency_text(obj.latency_ms)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
