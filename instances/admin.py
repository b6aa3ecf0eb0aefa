"""Admin for instances: settings, prompt sections, mates, members, secrets and channels.

Superusers see every instance; staff users see and edit only the instances they own or
administer (``instances.selectors.instances_administered_by``), whatever their Django
model permissions. Secrets and channel credentials are write-only: the forms have
password fields that never render a value, the sealed bytes are never shown, and a set
secret reads "set on <date>". Members are added by exact username, never picked from a
list of accounts, so the page names no account beyond the instance's members. Writes go
through ``instances.services``.

Apps above ``instances`` add their own inlines to the instance page through
``InstanceAdmin.extension_inlines`` (``skills.admin`` adds skills and computed tools).
"""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UsernameField
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from instances.models import (
    ChannelConfig,
    Instance,
    InstanceMember,
    InstanceSecret,
    Mate,
    PromptSection,
)
from instances.selectors import (
    instances_administered_by,
    tier_secrets_missing,
    user_can_administer,
)
from instances.services import (
    channel_config_set,
    instance_config_saved,
    instance_create,
    instance_delete,
    instance_secret_delete,
    instance_secret_set,
)
from openmates.models import AICall


def administers(request: HttpRequest, instance: Instance | None) -> bool:
    """Whether the request's user may administer ``instance`` (any instance when ``None``)."""
    user = request.user
    if not user.is_active or not user.is_staff:
        return False
    if user.is_superuser:
        return True
    if instance is None:
        return instances_administered_by(user=user).exists()
    return user_can_administer(instance=instance, user=user)


class InstanceScopedInline(admin.options.InlineModelAdmin):
    """Inline permissions follow the parent instance, not Django model permissions."""

    extra = 0

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, obj)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is not None and administers(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is not None and administers(request, obj)


class PromptSectionInline(InstanceScopedInline, admin.StackedInline):
    """The eight fixed sections: text editable, none added or removed."""

    model = PromptSection
    fields = ("key", "content")
    readonly_fields = ("key",)
    can_delete = False
    max_num = len(PromptSection.Key.values)

    def get_queryset(self, request: HttpRequest) -> QuerySet[PromptSection]:
        order = Case(
            *(When(key=k, then=Value(i)) for i, k in enumerate(PromptSection.Key.values)),
            output_field=IntegerField(),
        )
        return super().get_queryset(request).order_by(order)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MateInline(InstanceScopedInline, admin.StackedInline):
    model = Mate
    fields = ("name", "category", "description", "system_prompt", "is_default")


class InstanceMemberForm(forms.ModelForm):
    """A members row: a new one names its user by exact username; an existing one shows it
    read-only.

    There is no list, raw id or autocomplete of accounts: an instance's owners and admins
    must learn no username they do not already know. An unknown and an inactive username
    get the same error, "No such user.".
    """

    username = UsernameField(label="Username", max_length=150)

    class Meta:
        model = InstanceMember
        fields = ("role",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["username"]
        # UsernameField asks for autocomplete="username": the browser would offer the
        # signed-in admin's own name for every new row.
        field.widget.attrs["autocomplete"] = "off"
        if self.instance.pk:
            field.disabled, field.required = True, False
            self.initial["username"] = self.instance.user.get_username()

    def clean_username(self) -> str:
        """The exact username of an active account that is not yet a member.

        Raises:
            ValidationError: no active account has this username, or it is a member already.
        """
        if self.instance.pk:
            return self.instance.user.get_username()
        username: str = self.cleaned_data["username"]
        user_model = get_user_model()
        user = user_model._default_manager.filter(
            **{user_model.USERNAME_FIELD: username, "is_active": True}
        ).first()
        if user is None:
            raise forms.ValidationError("No such user.", code="unknown_user")
        if InstanceMember.objects.filter(instance_id=self.instance.instance_id, user=user).exists():
            raise forms.ValidationError("Already a member of this instance.", code="member")
        self.instance.user = user
        return username


class InstanceMemberFormSet(BaseInlineFormSet):
    """Keeps at least one owner and lists each user once; only owners and superusers grant
    or take the owner role."""

    may_manage_owners = False

    def clean(self) -> None:
        super().clean()
        owners = 0
        users: set[int] = set()
        for form in self.forms:
            if not hasattr(form, "cleaned_data") or not form.cleaned_data:
                continue
            deleted = form.cleaned_data.get("DELETE", False)
            user_id = form.instance.user_id
            if user_id is not None and not deleted:
                if user_id in users:
                    raise forms.ValidationError("Each user can be listed once.")
                users.add(user_id)
            role = form.cleaned_data.get("role")
            was_owner = form.instance.pk and form.initial.get("role") == InstanceMember.Role.OWNER
            touches_owner = (role == InstanceMember.Role.OWNER and form.has_changed()) or (
                was_owner and (deleted or role != InstanceMember.Role.OWNER)
            )
            if touches_owner and not self.may_manage_owners:
                raise forms.ValidationError("Only an owner can grant or remove the owner role.")
            if not deleted and role == InstanceMember.Role.OWNER:
                owners += 1
        if owners == 0:
            raise forms.ValidationError("An instance keeps at least one owner.")


class InstanceMemberInline(InstanceScopedInline, admin.TabularInline):
    """Members by username (see :class:`InstanceMemberForm`), for superusers too."""

    model = InstanceMember
    form = InstanceMemberForm
    formset = InstanceMemberFormSet
    fields = ("username", "role", "created_at")
    readonly_fields = ("created_at",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[InstanceMember]:
        # Each row shows its user's name.
        return super().get_queryset(request).select_related("user")

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = cast("type[InstanceMemberFormSet]", super().get_formset(request, obj, **kwargs))
        user = request.user
        formset.may_manage_owners = bool(user.is_superuser) or (
            obj is not None
            and obj.members.filter(user=user, role=InstanceMember.Role.OWNER).exists()
        )
        return formset


class InstanceSecretForm(forms.ModelForm):
    """Name plus a write-only value; an existing secret keeps its name and, if the value
    is left empty, its value."""

    value = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave empty to keep the current value.",
    )

    class Meta:
        model = InstanceSecret
        fields = ("name",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # The name is bound into the sealed value's associated data.
            self.fields["name"].disabled = True

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.instance.pk and cleaned.get("name") and not cleaned.get("value"):
            self.add_error("value", "A new secret needs a value.")
        return cleaned


class InstanceSecretInline(InstanceScopedInline, admin.TabularInline):
    model = InstanceSecret
    form = InstanceSecretForm
    fields = ("name", "value", "status")
    readonly_fields = ("status",)
    extra = 1

    @admin.display(description="Status")
    def status(self, obj: InstanceSecret) -> str:
        if not obj.pk:
            return "not set"
        return f"set on {obj.updated_at:%Y-%m-%d %H:%M} UTC"


class ChannelConfigForm(forms.ModelForm):
    """Kind, switch, and write-only credentials as a JSON object."""

    credentials = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text='Write-only JSON, e.g. {"bot_token": "…"} for Telegram, '
        '{"bot_token": "…", "signing_secret": "…"} for Slack. Leave empty to keep.',
    )

    class Meta:
        model = ChannelConfig
        fields = ("kind", "enabled")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # The kind is bound into the sealed credentials' associated data.
            self.fields["kind"].disabled = True

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        raw, kind = cleaned.get("credentials"), cleaned.get("kind")
        parsed: dict[str, str] | None = None
        if raw:
            try:
                loaded = json.loads(raw)
            except ValueError:
                loaded = None
            if not isinstance(loaded, dict) or not all(
                isinstance(v, str) and v for v in loaded.values()
            ):
                self.add_error("credentials", "Enter a JSON object of non-empty strings.")
                return cleaned
            parsed = loaded
            missing = [
                f for f in ChannelConfig.REQUIRED_CREDENTIALS.get(kind or "", ()) if f not in parsed
            ]
            if missing:
                self.add_error("credentials", f"Missing: {', '.join(missing)}.")
        has_stored = bool(self.instance.pk and self.instance.credentials_sealed is not None)
        if cleaned.get("enabled") and parsed is None and not has_stored:
            self.add_error("enabled", "Set the credentials before enabling the channel.")
        cleaned["credentials_parsed"] = parsed
        return cleaned


class ChannelConfigInline(InstanceScopedInline, admin.TabularInline):
    model = ChannelConfig
    form = ChannelConfigForm
    fields = ("kind", "enabled", "credentials", "credentials_status", "last_error")
    readonly_fields = ("credentials_status", "last_error")

    @admin.display(description="Credentials")
    def credentials_status(self, obj: ChannelConfig) -> str:
        if obj.credentials_set_at is None:
            return "not set"
        return f"set on {obj.credentials_set_at:%Y-%m-%d %H:%M} UTC"


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = (
        "slug",
        "name",
        "default_language",
        "memory_enabled",
        "follow_ups_enabled",
        "model_preprocessing_enabled",
        "created_at",
    )
    list_filter = (
        "default_language",
        "memory_enabled",
        "follow_ups_enabled",
        "model_preprocessing_enabled",
    )
    search_fields = ("slug", "name")
    readonly_fields = (
        "tier_secrets",
        "provider_last_error",
        "key_version",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("slug", "name", "default_language")}),
        (
            "Models",
            {
                "fields": (
                    "tier_map",
                    "tier_secrets",
                    "provider_last_error",
                    "embedding_model",
                    "embedding_dimensions",
                )
            },
        ),
        (
            "Switches",
            {
                "fields": (
                    "memory_enabled",
                    "follow_ups_enabled",
                    "model_preprocessing_enabled",
                    "model_tool_preselection",
                    "tools_offer_all_up_to",
                )
            },
        ),
        ("Record", {"fields": ("key_version", "created_at", "updated_at")}),
    )
    base_inlines: list[type[admin.options.InlineModelAdmin]] = [
        PromptSectionInline,
        MateInline,
        InstanceMemberInline,
        InstanceSecretInline,
        ChannelConfigInline,
    ]
    # Appended by apps above ``instances`` (see the module docstring).
    extension_inlines: list[type[admin.options.InlineModelAdmin]] = []

    @admin.display(description="Secrets of the tier map")
    def tier_secrets(self, obj: Instance) -> str:
        if not obj.pk:
            return "-"
        missing = tier_secrets_missing(obj)
        return f"not set: {', '.join(missing)}" if missing else "all set"

    @admin.display(description="Provider's last error")
    def provider_last_error(self, obj: Instance) -> str:
        """The instance's latest failed AI call: when, model, reason and sanitised message,
        and whether a call succeeded since."""
        if not obj.pk:
            return "-"
        calls = AICall.objects.filter(instance_id=obj.pk)
        last = calls.filter(outcome=AICall.Outcome.ERROR).order_by("-created_at").first()
        if last is None:
            return "none recorded"
        text = f"{last.created_at:%Y-%m-%d %H:%M:%S} UTC, {last.model}: "
        text += f"{last.error_reason or last.error_class} ({last.error_message or 'no message'})"
        later = calls.filter(outcome=AICall.Outcome.OK, created_at__gt=last.created_at)
        return text + ("; a later call succeeded" if later.exists() else "")

    def get_inlines(self, request: HttpRequest, obj: Any) -> list[Any]:
        # A new instance is created with its defaults first; its rows are edited after.
        if obj is None:
            return []
        return [*self.base_inlines, *self.extension_inlines]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Instance]:
        return instances_administered_by(user=request.user)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, "slug") if obj is not None else fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return administers(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        if not user.is_active or not user.is_staff:
            return False
        if user.is_superuser:
            return True
        return obj is not None and obj.members.filter(user=user, role="owner").exists()

    def delete_model(self, request: HttpRequest, obj: Instance) -> None:
        instance_delete(instance=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Instance]) -> None:
        for instance in queryset:
            instance_delete(instance=instance)

    def save_model(self, request: HttpRequest, obj: Instance, form: Any, change: bool) -> None:
        if change:
            obj.save()
            return
        fields = {k: v for k, v in form.cleaned_data.items() if k not in ("slug", "name")}
        created = instance_create(slug=obj.slug, name=obj.name, owner=request.user, **fields)
        # The admin keeps using ``obj``; make it the created row.
        obj.pk = created.pk
        obj._state.adding = False
        obj.refresh_from_db()

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is InstanceSecret:
            self._save_secrets(form.instance, formset)
        elif formset.model is ChannelConfig:
            self._save_channels(form.instance, formset)
        else:
            super().save_formset(request, form, formset, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        instance_config_saved(instance=form.instance)

    @staticmethod
    def _save_secrets(instance: Instance, formset: BaseInlineFormSet) -> None:
        # The admin's change message reads these three lists (``formset.save()`` would set
        # them); the values go through the services, never through the form's model.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for secret_form in formset.forms:
            name = secret_form.instance.name or secret_form.cleaned_data.get("name")
            if not name:
                continue
            if secret_form in formset.deleted_forms:
                if instance_secret_delete(instance=instance, name=name):
                    formset.deleted_objects.append(secret_form.instance)
            elif secret_form.cleaned_data.get("value"):
                existed = bool(secret_form.instance.pk)
                secret = instance_secret_set(
                    instance=instance, name=name, value=secret_form.cleaned_data["value"]
                )
                if existed:
                    formset.changed_objects.append((secret, ["value"]))
                else:
                    formset.new_objects.append(secret)

    @staticmethod
    def _save_channels(instance: Instance, formset: BaseInlineFormSet) -> None:
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for channel_form in formset.forms:
            if not channel_form.has_changed() and not channel_form.instance.pk:
                continue
            if channel_form in formset.deleted_forms:
                if channel_form.instance.pk:
                    channel_form.instance.delete()
                    formset.deleted_objects.append(channel_form.instance)
                continue
            if not channel_form.has_changed():
                continue
            existed = bool(channel_form.instance.pk)
            kind = channel_form.cleaned_data.get("kind") or channel_form.instance.kind
            channel = channel_config_set(
                instance=instance,
                kind=kind,
                credentials=channel_form.cleaned_data.get("credentials_parsed"),
                enabled=bool(channel_form.cleaned_data.get("enabled")),
            )
            if existed:
                formset.changed_objects.append((channel, channel_form.changed_data))
            else:
                formset.new_objects.append(channel)
