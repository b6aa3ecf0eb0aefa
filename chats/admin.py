"""Admin views of chats: metadata only (content is client ciphertext, never shown)."""

from __future__ import annotations

from django.contrib import admin

from chats.models import Chat, Embed, Message


@admin.register(Chat)
class ChatAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "instance", "mode", "version", "message_count", "updated_at")
    list_filter = ("mode", "instance")
    search_fields = ("id", "owner__username")
    fields = (
        "id",
        "owner",
        "instance",
        "mode",
        "version",
        "message_count",
        "pinned",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("id", "chat", "role", "status", "model", "version", "created_at")
    list_filter = ("role", "status")
    fields = (
        "id",
        "chat",
        "role",
        "status",
        "failure_reason",
        "model",
        "version",
        "prompt_tokens",
        "completion_tokens",
        "created_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Embed)
class EmbedAdmin(admin.ModelAdmin):
    list_display = ("id", "chat", "tool", "status", "created_at")
    list_filter = ("status", "tool")
    fields = ("id", "chat", "message", "tool", "status", "version", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
