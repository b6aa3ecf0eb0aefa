"""Re-embedding an instance's memories after its embedding model changed
(``manage.py reembed_memories``, docs/architecture.md §12)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import F, Func, IntegerField, Q, QuerySet

from memories import keys, selectors, vectors
from memories.models import Memory
from openmates import crypto


@dataclass
class ReembedReport:
    """What :func:`memories_reembed` did: rows re-embedded, rows that would not open
    (left as they were; the next run tries them again), the dimension indexed now and
    the dimensions whose indexes were dropped."""

    total: int = 0
    done: int = 0
    failed: int = 0
    dims: int = 0
    indexes_dropped: list[int] = field(default_factory=list)


def _with_dims(rows: QuerySet[Memory]) -> QuerySet[Memory]:
    return rows.annotate(
        dims=Func(F("embedding"), function="vector_dims", output_field=IntegerField())
    )


def _pending(instance: Any) -> QuerySet[Memory]:
    """The instance's memories not embedded by its current model and dimension."""
    current = Q(embedding_model=str(instance.embedding_model)) & Q(
        dims=int(instance.embedding_dimensions)
    )
    return _with_dims(Memory.objects.filter(instance_id=instance.pk)).exclude(current)


def _texts(instance: Any, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows that open, with their texts (rows that do not are left out)."""
    keys_by_user: dict[int, str | None] = {}
    opened: list[dict[str, Any]] = []
    texts: list[str] = []
    for row in rows:
        user_id = int(row["user_id"])
        if user_id not in keys_by_user:
            keys_by_user[user_id] = selectors.current_key(instance_id=instance.pk, user_id=user_id)
        key = keys_by_user[user_id]
        if key is None:
            continue
        try:
            texts.append(
                keys.content_open(
                    key=key,
                    user_id=user_id,
                    memory_id=str(row["id"]),
                    sealed=bytes(row["content_sealed"]),
                )
            )
        except crypto.DecryptionError:
            continue
        opened.append(row)
    return opened, texts


def _reembed_batch(instance: Any, rows: list[dict[str, Any]]) -> tuple[int, list[Any]]:
    """Re-embed one batch; returns (re-embedded, ids of rows that would not open)."""
    opened, texts = _texts(instance, rows)
    embedded = async_to_sync(vectors.aembed)(instance, texts)
    done = 0
    with transaction.atomic():
        for row, vector in zip(opened, embedded, strict=True):
            # Only if unchanged since it was read: an edit meanwhile embedded its new text.
            done += Memory.objects.filter(pk=row["id"], updated_at=row["updated_at"]).update(
                embedding=vector, embedding_model=str(instance.embedding_model)
            )
    kept = {row["id"] for row in opened}
    return done, [row["id"] for row in rows if row["id"] not in kept]


def _indexes_settle(instance: Any, dims: int) -> list[int]:
    """Build the index of ``dims``; drop those of dimensions no row has any more."""
    with transaction.atomic():
        vectors.vector_index_ensure(instance.pk, dims)
        remaining = set(
            Memory.objects.filter(instance_id=instance.pk)
            .annotate(
                dims=Func(F("embedding"), function="vector_dims", output_field=IntegerField())
            )
            .values_list("dims", flat=True)
            .distinct()
        )
        dropped = [
            old
            for old in vectors.vector_index_dims(instance.pk)
            if old != dims and old not in remaining
        ]
        for old in dropped:
            vectors.vector_index_drop(instance.pk, old)
    return dropped


def memories_reembed(
    *, instance: Any, batch_size: int = 64, progress: Callable[[str], None] | None = None
) -> ReembedReport:
    """Re-embed the instance's memories with its current embedding model (resumable).

    Every memory whose vector is of another model or dimension is decrypted, embedded
    again and updated, ``batch_size`` at a time (one transaction per batch), so a run
    that stops leaves finished batches finished and the next run does the rest. The
    column has no dimension, so a new dimension changes no column type: its HNSW index
    is built after the rows (faster than growing it row by row) and the indexes of
    dimensions no row has any more are dropped. ``progress`` gets one line per batch.

    Raises:
        openmates.llm.LLMError, memories.vectors.VectorError: the model failed (the
            batches done so far stay done).
        openmates.vault.VaultError: Vault unusable.
    """
    say = progress or (lambda line: None)
    dims = int(instance.embedding_dimensions)
    report = ReembedReport(total=_pending(instance).count(), dims=dims)
    say(f"{report.total} memories to re-embed with {instance.embedding_model} ({dims} dimensions)")
    skipped: list[Any] = []
    while True:
        rows: list[dict[str, Any]] = [
            dict(row)
            for row in _pending(instance)
            .exclude(pk__in=skipped)
            .order_by("pk")
            .values("id", "user_id", "content_sealed", "updated_at")[:batch_size]
        ]
        if not rows:
            break
        done, failed = _reembed_batch(instance, rows)
        report.done += done
        report.failed += len(failed)
        skipped += failed
        say(f"re-embedded {report.done} of {report.total} ({report.failed} would not open)")
    report.indexes_dropped = _indexes_settle(instance, dims)
    return report
