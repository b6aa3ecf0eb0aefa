"""Chat-channel adapters: instances answer on Telegram and Slack (docs/channels.md)."""

from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class MessagingConfig(AppConfig):
    """Starts the channel manager (docs/channels.md §2) in processes that serve requests."""

    name = "messaging"
    verbose_name = "Chat channels"

    def ready(self) -> None:
        from openmates.apps import serving

        if serving() and settings.MESSAGING_ENABLED:
            from messaging import runtime

            runtime.start_in_thread()
