"""App config for the project package: registers system checks and warms LiteLLM."""

from __future__ import annotations

from django.apps import AppConfig


class OpenMatesConfig(AppConfig):
    """Registers the production checks (``openmates.checks``) at start-up."""

    name = "openmates"
    verbose_name = "OpenMates"

    def ready(self) -> None:
        from openmates import checks  # noqa: F401  (registers the checks)
