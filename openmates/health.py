"""Liveness and readiness endpoints (filled in with the foundation)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse


def liveness(request: HttpRequest) -> JsonResponse:
    """200 while the process serves requests."""
    return JsonResponse({"status": "ok"})


def readiness(request: HttpRequest) -> JsonResponse:
    """Readiness of the components."""
    return JsonResponse({"status": "ok"})
