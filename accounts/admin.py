"""Admin for sign-up policies, invitations (tokens are shown once, on creation), API
tokens (listed and revoked here; created by ``create_api_key`` or the account page, so a
plaintext token never passes through the admin's message storage) and users (Django's
user admin, deleting through ``account_delete``)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import ApiToken, Invitation, SignupPolicy
from accounts.services import account_delete, api_token_revoke, invitation_create
from accounts.usernames import username_validate


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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "user",
        "name",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user",)
    search_fields = ("prefix", "name", "user__username")
    # The digest is never shown; nothing is editable (revoke is the one change).
    fields = ("prefix", "user", "name", "created_at", "last_used_at", "expires_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting would not close the token's sockets; revoking does.
        return False

    @admin.action(description="Revoke the selected API tokens (their sockets close)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        tokens = list(queryset)
        for token in tokens:
            api_token_revoke(token=token)
        messages.success(request, f"Revoked {len(tokens)} API token(s).")


class _UserCreationForm(AdminUserCreationForm):
    """Django's add-user form; the username may neither mix scripts nor read like an
    existing one (``accounts.usernames``)."""

    def clean_username(self) -> str:
        # Django's check gives None (whatever its stubs say) after adding its own "already
        # exists" error (a name equal to another but for case): nothing more to check then.
        username: str | None = super().clean_username()
        if username is None:
            return ""
        username_validate(username)
        return username


class _UserChangeForm(UserChangeForm):
    """Django's change-user form; a new username is held to the sign-up's rules."""

    def clean_username(self) -> str:
        username: str = self.cleaned_data["username"]
        if username != self.initial.get("username"):
            username_validate(username, exclude_pk=self.instance.pk)
        return username


admin.site.unregister(User)


@admin.register(User)
class AccountUserAdmin(UserAdmin):
    """Django's user admin; deleting a user is an account deletion (``account_delete``):
    the transit key is shredded and the caches dropped, not only the rows.

    A Vault failure raises (an error page) and leaves that user undeleted. New and renamed
    usernames may neither mix scripts nor read like an existing one.
    """

    add_form = _UserCreationForm
    form = _UserChangeForm

    def delete_model(self, request: HttpRequest, obj: User) -> None:
        account_delete(user=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            account_delete(user=user)
