"""Routes under ``/v1/`` (the OpenAI-compatible API; docs/api.md §3)."""

from __future__ import annotations

from django.urls import path, re_path

from openai_api import views

app_name = "v1"

urlpatterns = [
    path("models", views.models, name="models"),
    path("chat/completions", views.chat_completions, name="chat-completions"),
    # Anything else under /v1/ is an OpenAI-shaped 404, never Django's HTML page.
    re_path(r"^.*$", views.not_found, name="not-found"),
]
