"""Project-level models: the AI call log.

``AICall`` is written by ``openmates.llm`` for every attempt at a model call (one row per
provider tried). It holds ids, names, counts, timings and a failure's reason and sanitised
message, never message text. The
instance and chat are kept as plain ids so the log outlives deleted instances and
chats and ``openmates`` depends on no app above it (docs/architecture.md §2).
"""

from __future__ import annotations

from django.db import models


class AICall(models.Model):
    """One attempt at a completion, a stream or an embedding call."""

    class Kind(models.TextChoices):
        COMPLETION = "completion"
        STREAM = "stream"
        EMBEDDING = "embedding"

    class Outcome(models.TextChoices):
        OK = "ok"
        ERROR = "error"
        CANCELLED = "cancelled"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    instance_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    chat_id = models.CharField(max_length=64, blank=True, db_index=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    stage = models.CharField(max_length=32)
    tier = models.CharField(max_length=16, blank=True)
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # US dollars from LiteLLM's bundled price map; 0 for models it does not know.
    cost_usd = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    latency_ms = models.FloatField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error_class = models.CharField(max_length=100, blank=True)
    # A failure's user-facing reason (openmates.llm.FAILURE_REASONS, docs/protocol.md §8)
    # and the provider's message, sanitised (openmates.llm_calllog.sanitised_error_message:
    # keys redacted, quoted text removed); both empty for a success or a cancellation.
    error_reason = models.CharField(max_length=32, blank=True, db_index=True)
    error_message = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "AI call"
        verbose_name_plural = "AI calls"

    def __str__(self) -> str:
        return f"{self.kind} {self.model} {self.outcome}"
