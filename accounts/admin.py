"""Admin for sign-up policies and invitations (tokens are shown once, on creation)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.http import HttpRequest

from accounts.models import Invitation, SignupPolicy
from accounts.services import invitation_create


@admin.register(SignupPolicy)
class SignupPolicyAdmin(admin.ModelAdmin):
    list_display = ("instance", "open_signup")


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ("instance", "email", "created_at", "expires_at", "used_at", "used_by")
    list_filter = ("instance",)
    fields = ("instance", "email")
    readonly_fields = ("used_by", "used_at")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Invitation, form: Any, change: bool) -> None:
        created, token = invitation_create(
            instance=obj.instance, created_by=cast("User", request.user), email=obj.email
        )
        obj.pk = created.pk
        link = request.build_absolute_uri(f"/accounts/signup/?invite={token}")
        messages.success(request, f"Invitation link (shown once): {link}")
