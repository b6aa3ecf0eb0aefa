"""Admin views of memories: metadata only (category, dates, source chat), never the text,
its vector or its blind-index tokens."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memories.models import Memory, MemorySettings


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "user",
        "instance",
        "category",
        "source_chat_id",
        "created_at",
        "updated_at",
    )
    list_filter = ("category", "instance")
    search_fields = ("id", "user__username", "source_chat_id")
    fields = (
        "id",
        "user",
        "instance",
        "category",
        "embedding_model",
        "source_chat_id",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Memory]:
        """Rows without their sealed text, vector and tokens (never loaded, never shown)."""
        return (
            super()
            .get_queryset(request)
            .select_related("user", "instance")
            .only(
                "id",
                "user__username",
                "instance__slug",
                "instance__name",
                "category",
                "embedding_model",
                "source_chat_id",
                "created_at",
                "updated_at",
            )
        )

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(MemorySettings)
class MemorySettingsAdmin(admin.ModelAdmin):
    list_display = ("user", "instance", "enabled", "key_generation", "updated_at")
    list_filter = ("enabled", "instance")
    search_fields = ("user__username",)
    fields = ("user", "instance", "enabled", "key_generation", "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        # Deleting the row would lose the key generation of the user's memory key.
        return False
