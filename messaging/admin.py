"""Admin of the chat channels' state (docs/channels.md §2): per channel its id, the URL
the platform posts to, status (running, stopped, error with the reason), mode, when an
update last came in, and a "test connection" action. Credentials are set in the
instance's page (write-only)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse

from instances.admin import administers
from instances.models import ChannelConfig
from instances.selectors import instances_administered_by
from messaging.manager import connection_test
from messaging.models import ChannelState


@admin.register(ChannelConfig)
class ChannelStatusAdmin(admin.ModelAdmin):
    """Read-only list of channels with their state; edits stay on the instance's page."""

    list_display = (
        "id", "instance", "kind", "enabled", "endpoint", "status", "mode", "last_update",
        "last_error",
    )  # fmt: skip
    list_filter = ("kind", "enabled")
    list_select_related = ("instance", "state")
    fields = (
        "id", "instance", "kind", "enabled", "endpoint", "status", "mode", "last_update",
        "last_error",
    )  # fmt: skip
    readonly_fields = fields
    actions = ("test_connection",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ChannelConfig]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(instance__in=instances_administered_by(user=request.user))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return administers(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return administers(request, obj.instance if obj is not None else None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @staticmethod
    def _state(obj: ChannelConfig) -> ChannelState | None:
        try:
            return obj.state
        except ChannelState.DoesNotExist:
            return None

    @admin.display(description="Webhook / request URL")
    def endpoint(self, obj: ChannelConfig) -> str:
        """Where the platform posts this channel's updates: Slack's Event Subscriptions
        request URL (to be entered in the app's settings), Telegram's webhook (set by the
        adapter), or for Telegram without ``MESSAGING_PUBLIC_URL`` that it is polled."""
        base = str(settings.MESSAGING_PUBLIC_URL).rstrip("/")
        path = reverse(f"channel-{obj.kind}", kwargs={"config_id": obj.pk})
        if obj.kind == "telegram" and not base:
            return "none: long-polled (MESSAGING_PUBLIC_URL is not set)"
        return f"{base or 'https://<this server>'}{path}"

    @admin.display(description="Status")
    def status(self, obj: ChannelConfig) -> str:
        state = self._state(obj)
        if state is None:
            return "stopped" if not obj.enabled else "not started yet"
        return f"{state.status}: {state.reason}" if state.reason else state.status

    @admin.display(description="Mode")
    def mode(self, obj: ChannelConfig) -> str:
        state = self._state(obj)
        return state.mode if state is not None else ""

    @admin.display(description="Last update received")
    def last_update(self, obj: ChannelConfig) -> str:
        state = self._state(obj)
        if state is None or state.last_update_at is None:
            return "never"
        return f"{state.last_update_at:%Y-%m-%d %H:%M:%S} UTC"

    @admin.action(description="Test connection")
    def test_connection(self, request: HttpRequest, queryset: QuerySet[ChannelConfig]) -> None:
        for config in queryset.select_related("instance"):
            ok, detail = async_to_sync(connection_test)(config_id=config.pk)
            level = messages.SUCCESS if ok else messages.ERROR
            self.message_user(request, f"{config}: {detail}", level)
