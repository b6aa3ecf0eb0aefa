"""Routes under ``/api/memories/`` (see ``memories.api``)."""

from __future__ import annotations

from django.urls import path

from memories import api

app_name = "memories"

urlpatterns = [
    path("<slug:instance>/", api.MemoryListApi.as_view(), name="list"),
    path("<slug:instance>/search/", api.MemorySearchApi.as_view(), name="search"),
    path("<slug:instance>/export/", api.MemoryExportApi.as_view(), name="export"),
    path("<slug:instance>/settings/", api.MemorySettingsApi.as_view(), name="settings"),
    path("<slug:instance>/forget/", api.MemoryForgetApi.as_view(), name="forget"),
    path("<slug:instance>/<str:memory_id>/", api.MemoryDetailApi.as_view(), name="detail"),
]
