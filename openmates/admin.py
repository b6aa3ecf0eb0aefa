"""Admin for the AI call log: read-only (rows are written only by ``openmates.llm``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from openmates.models import AICall


@admin.register(AICall)
class AICallAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "instance_id",
        "stage",
        "tier",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "latency_ms",
        "outcome",
        "error_class",
    ]
    list_filter = ["outcome", "kind", "stage", "tier", "provider"]
    search_fields = ["model", "chat_id", "error_class"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
