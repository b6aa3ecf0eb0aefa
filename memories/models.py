"""Memories: what the assistant remembers of one user of one instance (docs/architecture.md §12).

Writes go through ``memories.services``, reads through ``memories.selectors`` and
``memories.search``. A memory's text is stored only sealed (``openmates.crypto``, purpose
``memory``) under the transit key of its (instance, user) and key generation
(``memories.keys``); its words only as keyed blind-index tokens (``memories.blind_index``,
purpose ``blind-index``). Nothing here holds plaintext (docs/crypto.md §4).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from pgvector.django import VectorField

from instances.models import Instance


class Memory(models.Model):
    """One remembered fact of one user of one instance.

    ``embedding`` has no fixed dimension in the column: each instance has its own partial
    HNSW index over ``embedding::vector(<its dimension>)`` (``memories.vectors``), so
    instances may use models of different sizes and a model change re-embeds one instance
    only. ``blind_index`` holds 64-bit keyed HMACs of the normalised words, word pairs and
    CJK bigrams, sorted and without duplicates. ``source_chat_id`` is a plain id: chats
    sit above memories in the layering (docs/architecture.md §2).
    """

    class Category(models.TextChoices):
        PREFERENCE = "preference", "Preference"
        FACT = "fact", "Fact"
        EVENT = "event", "Event"
        RELATIONSHIP = "relationship", "Relationship"
        DECISION = "decision", "Decision"
        GENERAL = "general", "General"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="memories")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories"
    )
    category = models.CharField(max_length=16, choices=Category.choices)
    content_sealed = models.BinaryField()
    embedding = VectorField()
    embedding_model = models.CharField(max_length=200)
    blind_index = ArrayField(models.BigIntegerField(), default=list)
    source_chat_id = models.CharField(max_length=36, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "memories"
        indexes = [
            models.Index(
                fields=("instance", "user", "-created_at", "-id"), name="memory_owner_created"
            ),
            models.Index(fields=("instance", "user", "category"), name="memory_owner_category"),
            GinIndex(fields=("blind_index",), name="memory_blind_index"),
        ]

    def __str__(self) -> str:
        return f"{self.category} memory {self.pk}"


class MemorySettings(models.Model):
    """One user's memory switch and key generation in one instance.

    ``key_generation`` names the transit key the user's memories are sealed under
    (``memory-<instance>-<user>-<generation>``); "forget everything" deletes that key and
    the rows and moves to the next generation, so no process can seal a new memory with a
    data key of the deleted one. The row exists once the user has had a memory or changed
    the switch; without it memory is on.
    """

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="memory_settings")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_settings"
    )
    enabled = models.BooleanField(default=True)
    key_generation = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "memory settings"
        constraints = [
            models.UniqueConstraint(fields=("instance", "user"), name="memory_settings_unique")
        ]

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"memory {state} for user {self.user_id} in instance {self.instance_id}"


class MemoryConsent(models.Model):
    """A user's answer for one chat and one memory category: may the chat's turns use the
    memories of that category (docs/architecture.md §12)?

    The durable copy of the answers; Redis ``chat:{cid}:memory_consent`` caches them for
    the turns. ``chat_id`` is the chat's id as a plain UUID, not a foreign key: chats sit
    above memories in the layering (docs/architecture.md §2); ``chats.services.chat_delete``
    deletes a chat's rows (the hook ``pipeline.apps`` registers), the user's cascade an
    account's. Only answers are kept here
    ("the user was asked" lives in Redis alone).
    """

    class Decision(models.TextChoices):
        ALLOWED = "allowed", "Allowed"
        DENIED = "denied", "Denied"

    chat_id = models.UUIDField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_consents"
    )
    category = models.CharField(max_length=16, choices=Memory.Category.choices)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=("chat_id", "user", "category"), name="memory_consent_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.category} {self.decision} in chat {self.chat_id}"
