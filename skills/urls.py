"""Routes under ``/api/skills/`` (see ``skills.api``; docs/api.md §1)."""

from __future__ import annotations

from django.urls import path

from skills import api

app_name = "skills"

urlpatterns = [
    path("", api.SkillCatalogApi.as_view(), name="catalog"),
    path("instances/<slug:slug>/", api.InstanceSkillsApi.as_view(), name="instance"),
    path(
        "instances/<slug:slug>/<slug:skill>/", api.InstanceSkillApi.as_view(), name="instance-skill"
    ),
]
