"""The OpenAI-compatible ``/v1`` endpoint, its limits, and the analytics REST API."""

from __future__ import annotations

from django.apps import AppConfig


class OpenaiApiConfig(AppConfig):
    """``/v1`` (docs/api.md §3-§5) and ``/api/analytics/`` (docs/api.md §2)."""

    name = "openai_api"
    verbose_name = "OpenAI-compatible API"
