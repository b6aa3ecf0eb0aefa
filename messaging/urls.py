"""Routes of the chat channels' webhooks, under ``/channels/`` (docs/channels.md §3)."""

from __future__ import annotations

from django.urls import path

from messaging import views

urlpatterns = [
    path("telegram/<int:config_id>/", views.telegram_webhook, name="channel-telegram"),
    path("slack/<int:config_id>/", views.slack_events, name="channel-slack"),
]
