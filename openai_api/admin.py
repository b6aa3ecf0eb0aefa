"""Admin for instance ``/v1`` keys (docs/api.md §4): created here (the key is shown once,
on the page that answers the creation, never through the message storage), listed and
revoked; the digest is never shown."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from accounts.instance_keys import instance_key_create, instance_key_revoke
from accounts.models import InstanceApiKey


@admin.register(InstanceApiKey)
class InstanceApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "instance", "name", "created_at", "last_used_at", "expires_at")
    list_filter = ("instance", ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("instance",)
    search_fields = ("prefix", "name", "instance__slug")
    readonly_fields = ("prefix", "user", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["instance", "name", "expires_at"]
        return ["prefix", "instance", "user", "name", "created_at", "last_used_at",
                "expires_at", "revoked_at"]  # fmt: skip

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Revoking keeps the pseudo-user's conversations and memories reachable for audit.
        return False

    def save_model(
        self, request: HttpRequest, obj: InstanceApiKey, form: Any, change: bool
    ) -> None:
        key, raw = instance_key_create(
            instance=obj.instance, name=obj.name, expires_at=obj.expires_at
        )
        obj.pk, obj.prefix = key.pk, key.prefix
        request._instance_key_raw = raw  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: InstanceApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "key": obj,
            "raw": getattr(request, "_instance_key_raw", ""),
            "opts": self.model._meta,
            "title": "Instance API key created",
        }
        return TemplateResponse(request, "openai_api/key_created.html", context)

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[InstanceApiKey]) -> None:
        keys = list(queryset)
        for key in keys:
            instance_key_revoke(key=key)
        messages.success(request, f"Revoked {len(keys)} key(s).")
