"""Top-level URL routes."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.http import FileResponse, HttpRequest
from django.urls import include, path
from django.views.decorators.cache import cache_control
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts.api import AccountDeleteApi
from accounts.views import app_shell
from openmates import health


@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> FileResponse:
    """``/favicon.ico``, which browsers ask for on every page: the app's icon (static/)."""
    icon = settings.BASE_DIR / "static" / "favicon.ico"
    return FileResponse(icon.open("rb"), content_type="image/x-icon")


urlpatterns = [
    path("", app_shell, name="home"),
    path("favicon.ico", favicon, name="favicon"),
    path("accounts/", include("accounts.urls")),
    path("health", health.liveness, name="health"),
    path("health/ready", health.readiness, name="health-ready"),
    path("admin/", admin.site.urls),
    path("api/chats/", include("chats.urls")),
    path("api/memories/", include("memories.urls")),
    path("api/instances/", include("instances.urls")),
    path("api/skills/", include("skills.urls")),
    path("api/analytics/", include("openai_api.analytics_urls")),
    path("api/account/", AccountDeleteApi.as_view(), name="account-delete"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        # The page's styles come from a file (the CSP refuses the stock template's inline one).
        SpectacularSwaggerSplitView.as_view(
            url_name="api-schema", template_name="openmates/api_docs.html"
        ),
        name="api-docs",
    ),
    path("v1/", include("openai_api.urls")),
    path("channels/", include("messaging.urls")),
]

# Unknown routes, refused requests (too large, bad Host) and unexpected errors under /api/
# answer JSON with a stable code too (docs/architecture.md §11).
handler400 = "openmates.api_errors.bad_request"
handler404 = "openmates.api_errors.page_not_found"
handler500 = "openmates.api_errors.server_error"
