"""Routes under ``/api/instances/`` (see ``instances.api``; docs/api.md §1)."""

from __future__ import annotations

from django.urls import path

from instances import api

app_name = "instances"

urlpatterns = [
    path("", api.InstanceListApi.as_view(), name="list"),
    path("<slug:slug>/", api.InstanceDetailApi.as_view(), name="detail"),
    path("<slug:slug>/members/", api.InstanceMembersApi.as_view(), name="members"),
    path(
        "<slug:slug>/prompt-sections/<str:key>/",
        api.PromptSectionApi.as_view(),
        name="prompt-section",
    ),
    path("<slug:slug>/mates/", api.MateListApi.as_view(), name="mates"),
    path("<slug:slug>/mates/<int:mate_id>/", api.MateDetailApi.as_view(), name="mate"),
    path("<slug:slug>/secrets/<str:name>/", api.SecretApi.as_view(), name="secret"),
]
