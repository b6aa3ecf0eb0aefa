"""Top-level URL routes."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from accounts.api import AccountDeleteApi
from accounts.views import app_shell
from openmates import health

urlpatterns = [
    path("", app_shell, name="home"),
    path("accounts/", include("accounts.urls")),
    path("health", health.liveness, name="health"),
    path("health/ready", health.readiness, name="health-ready"),
    path("admin/", admin.site.urls),
    path("api/chats/", include("chats.urls")),
    path("api/memories/", include("memories.urls")),
    path("api/account/", AccountDeleteApi.as_view(), name="account-delete"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
]

# Unknown routes, refused requests (too large, bad Host) and unexpected errors under /api/
# answer JSON with a stable code too (docs/architecture.md §11).
handler400 = "openmates.api_errors.bad_request"
handler404 = "openmates.api_errors.page_not_found"
handler500 = "openmates.api_errors.server_error"
