"""Top-level URL routes."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.generic import TemplateView

from openmates import health

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("health", health.liveness, name="health"),
    path("health/ready", health.readiness, name="health-ready"),
    path("admin/", admin.site.urls),
]
