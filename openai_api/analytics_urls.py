"""Routes under ``/api/analytics/`` (see ``openai_api.analytics``; docs/api.md §2)."""

from __future__ import annotations

from django.urls import path

from openai_api.analytics import AnalyticsApi

app_name = "analytics"

urlpatterns = [path("<slug:slug>/", AnalyticsApi.as_view(), name="instance")]
