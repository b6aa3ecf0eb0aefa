"""Who talks to an instance through a channel, their conversations, and each channel's state.

docs/channels.md §3. A platform user (a Telegram user id, a Slack ``team:user``) of an
instance has one pseudo-user of their own (``ChannelIdentity``), so memories and
conversations never mix between people or with web users; each chat or thread they talk
in is one server-managed conversation (``ChannelConversation``), until ``/new``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from chats.models import Chat
from instances.models import ChannelConfig, Instance


class ChannelIdentity(models.Model):
    """A platform user of an instance and their pseudo-user (``<kind>:<instance id>:<id>``:
    a name the sign-up form refuses, no usable password, no membership)."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=ChannelConfig.Kind.choices)
    platform_user_id = models.CharField(max_length=64)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="channel_identity"
    )
    display_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=("instance", "kind", "platform_user_id"), name="channel_identity_unique"
            )
        ]
        verbose_name_plural = "channel identities"

    def __str__(self) -> str:
        return f"{self.kind}:{self.platform_user_id}"


class ChannelConversation(models.Model):
    """The server-managed conversation a platform user has in one chat or thread
    (``chat_key``: Telegram ``<chat id>:<topic id>``, Slack ``<channel>:<thread ts>``)."""

    identity = models.ForeignKey(
        ChannelIdentity, on_delete=models.CASCADE, related_name="conversations"
    )
    chat_key = models.CharField(max_length=128)
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=("identity", "chat_key"), name="channel_conversation_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.identity}: {self.chat_key}"


class ChannelState(models.Model):
    """What the channel managers last reported for a ``ChannelConfig``: ``status``
    (running / stopped / error), its reason, and when an update last came in."""

    class Status(models.TextChoices):
        RUNNING = "running", "running"
        STOPPED = "stopped", "stopped"
        ERROR = "error", "error"

    config = models.OneToOneField(
        ChannelConfig, on_delete=models.CASCADE, primary_key=True, related_name="state"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STOPPED)
    reason = models.TextField(blank=True)
    mode = models.CharField(max_length=16, blank=True, help_text="webhook, polling or events")
    last_update_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.config}: {self.status}"
