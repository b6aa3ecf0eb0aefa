"""Writes of memories (docs/architecture.md §12): create, upsert with dedup, edit, delete,
the memory switch, "forget everything", and memories' part in account deletion.

A write embeds the text (``vectors.aembed``: the dimension, zeros and non-finite values
are checked before anything is stored), computes its blind-index tokens and seals it
under the user's current memory key, then runs one transaction that locks the user's
``MemorySettings`` row. That lock serialises one user's writes (two copies of one new
fact cannot both be inserted) against each other and against "forget everything", and
the key generation is re-checked under it.

Dedup (:func:`amemory_upsert`): the nearest memory of the same user in the same
instance, embedded by the same model, with cosine similarity above
:data:`DEDUP_SIMILARITY` is updated in place (text, category, vector, tokens, source
chat); otherwise a new memory is inserted.
"""

from __future__ import annotations

import logging
import re
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction

from memories import blind_index, keys, vectors
from memories.extraction import Fact
from memories.models import Memory, MemoryConsent, MemorySettings
from openmates import ids
from openmates.db import db_call

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 2000
DEDUP_SIMILARITY = 0.90
CATEGORIES = frozenset(Memory.Category.values)


class MemoryInputError(ValueError):
    """A memory's text, category or source chat cannot be stored; the message says why,
    ``field`` names which (``content``, ``category``, ``source_chat_id``)."""

    def __init__(self, message: str, *, field: str = "content") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class MemoryWrite:
    """What a write did: the memory, whether it is new, and (for an update by dedup) the
    cosine similarity of the memory it replaced."""

    memory: Memory
    created: bool
    similarity: float | None = None


@dataclass(frozen=True)
class _Prepared:
    generation: int
    key: str
    vector: list[float]
    tokens: list[int]


class _GenerationMovedError(Exception):
    """The user forgot everything between preparing a write and running it."""


# Removed from a memory before it is stored: bidi embeddings, overrides and isolates (an
# override shows the text after it reversed), zero-width spaces and other invisible
# operators, byte-order marks and tag characters (ASCII written invisibly: a memory goes
# into the model's system prompt). Joiners (ZWJ, ZWNJ) and direction marks stay, as
# scripts and emoji need them.
_HIDDEN_RE = re.compile(
    "[\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
)


def content_clean(content: Any) -> str:
    """``content`` without hidden characters (:data:`_HIDDEN_RE`), stripped, if it may be
    stored.

    Raises:
        MemoryInputError: not a string, blank (invisible characters count as blank),
            longer than :data:`MAX_CONTENT_CHARS`, or holding a NUL character.
    """
    if not isinstance(content, str):
        raise MemoryInputError("a memory's content is text")
    text = _HIDDEN_RE.sub("", content).strip()
    # Whitespace and format characters (zero-width, bidi controls, tags) show nothing.
    if all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text):
        raise MemoryInputError("a memory's content is empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise MemoryInputError(f"a memory holds at most {MAX_CONTENT_CHARS} characters")
    if "\x00" in text:
        raise MemoryInputError("a memory's content may not hold NUL characters")
    return text


def category_check(category: Any) -> str:
    """``category`` if it is one of ``Memory.Category``.

    Raises:
        MemoryInputError: naming the categories there are.
    """
    if category not in CATEGORIES:
        raise MemoryInputError(
            f"the category is one of {', '.join(sorted(CATEGORIES))}", field="category"
        )
    return str(category)


def _source_chat_clean(source_chat_id: Any) -> str:
    text = str(source_chat_id or "")
    if text and not ids.is_uuid7(text):
        raise MemoryInputError("source_chat_id is a chat id (UUIDv7)", field="source_chat_id")
    return text


def _settings_for_write(instance_id: int, user_id: int) -> int:
    """The user's key generation, creating the settings row on the first write."""
    found, _ = MemorySettings.objects.get_or_create(instance_id=instance_id, user_id=user_id)
    return int(found.key_generation)


async def _aprepare(instance: Any, user_id: int, content: str) -> _Prepared:
    generation = await db_call(_settings_for_write, instance.pk, user_id)
    await db_call(vectors.vector_index_ensure, instance.pk, int(instance.embedding_dimensions))
    key = keys.key_name(instance_id=instance.pk, user_id=user_id, generation=generation)
    await keys.akey_ensure(key)
    (vector,) = await vectors.aembed(instance, [content])
    secret = await keys.ablind_secret(key)
    # Warm now, so the sealing inside the write transaction makes no Vault call.
    await sync_to_async(keys.data_key_warm, thread_sensitive=False)(key)
    return _Prepared(generation, key, vector, blind_index.memory_tokens(secret, content))


def _nearest(
    *, instance_id: int, user_id: int, model: str, dims: int, vector: list[float]
) -> tuple[uuid.UUID, float] | None:
    """The user's memory nearest to ``vector`` and its cosine similarity (HNSW search)."""
    vectors.search_settings_apply()
    expression = vectors.column_expression(dims)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, 1 - ({expression} <=> {vectors.query_expression(dims)}) "  # noqa: S608 (integers and constants only)
            f"FROM {vectors.TABLE} WHERE {vectors.index_predicate(instance_id, dims)} "
            f"AND user_id = %s AND embedding_model = %s "
            f"ORDER BY {expression} <=> {vectors.query_expression(dims)} LIMIT 1",
            [vectors.vector_literal(vector), int(user_id), model, vectors.vector_literal(vector)],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], float(row[1]))


@dataclass(frozen=True)
class _Write:
    instance_id: int
    user_id: int
    category: str
    content: str
    source_chat_id: str
    model: str
    dims: int


def _write(
    spec: _Write, prepared: _Prepared, *, dedup: bool, memory_id: uuid.UUID | None
) -> MemoryWrite | None:
    """The write transaction; ``None`` when ``memory_id`` names no memory of the user."""
    with transaction.atomic():
        owner = MemorySettings.objects.select_for_update().get(
            instance_id=spec.instance_id, user_id=spec.user_id
        )
        if owner.key_generation != prepared.generation:
            raise _GenerationMovedError()
        target: Memory | None = None
        similarity: float | None = None
        if memory_id is not None:
            target = _locked(spec, memory_id)
            if target is None:
                return None
        elif dedup:
            near = _nearest(
                instance_id=spec.instance_id,
                user_id=spec.user_id,
                model=spec.model,
                dims=spec.dims,
                vector=prepared.vector,
            )
            if near is not None and near[1] > DEDUP_SIMILARITY:
                target, similarity = _locked(spec, near[0]), near[1]
        return _store(spec, prepared, target, similarity)


def _locked(spec: _Write, memory_id: uuid.UUID) -> Memory | None:
    return (
        Memory.objects.select_for_update()
        .filter(pk=memory_id, instance_id=spec.instance_id, user_id=spec.user_id)
        .only("id", "instance_id", "user_id", "created_at")
        .first()
    )


def _store(
    spec: _Write, prepared: _Prepared, target: Memory | None, similarity: float | None
) -> MemoryWrite:
    memory_id = target.pk if target is not None else uuid.uuid4()
    sealed = keys.content_seal(
        key=prepared.key, user_id=spec.user_id, memory_id=str(memory_id), content=spec.content
    )
    fields = {
        "category": spec.category,
        "content_sealed": sealed,
        "embedding": prepared.vector,
        "embedding_model": spec.model,
        "blind_index": prepared.tokens,
    }
    if target is None:
        memory = Memory.objects.create(
            id=memory_id,
            instance_id=spec.instance_id,
            user_id=spec.user_id,
            source_chat_id=spec.source_chat_id,
            **fields,
        )
        return MemoryWrite(memory, created=True)
    for name, value in fields.items():
        setattr(target, name, value)
    update = [*fields, "updated_at"]
    if spec.source_chat_id:
        target.source_chat_id = spec.source_chat_id
        update.append("source_chat_id")
    target.save(update_fields=update)
    return MemoryWrite(target, created=False, similarity=similarity)


async def _awrite(
    *,
    instance: Any,
    user_id: int,
    category: str,
    content: str,
    source_chat_id: str,
    dedup: bool,
    memory_id: uuid.UUID | None = None,
) -> MemoryWrite | None:
    spec = _Write(
        instance_id=instance.pk,
        user_id=int(user_id),
        category=category_check(category),
        content=content_clean(content),
        source_chat_id=_source_chat_clean(source_chat_id),
        model=str(instance.embedding_model),
        dims=int(instance.embedding_dimensions),
    )
    prepared = await _aprepare(instance, spec.user_id, spec.content)
    try:
        return await db_call(_write, spec, prepared, dedup=dedup, memory_id=memory_id)
    except _GenerationMovedError:
        # Forgotten meanwhile: the write lands under the new generation's key.
        logger.info("memories of user %s were forgotten during a write", user_id)
    prepared = await _aprepare(instance, spec.user_id, spec.content)
    return await db_call(_write, spec, prepared, dedup=dedup, memory_id=memory_id)


def _written(written: MemoryWrite | None) -> MemoryWrite:
    if written is None:
        raise RuntimeError("a write without a memory id always stores a memory")
    return written


async def amemory_upsert(
    *, instance: Any, user_id: int, category: str, content: str, source_chat_id: str = ""
) -> MemoryWrite:
    """Store a fact, or update the user's memory it duplicates (module docstring).

    Returns what happened (``created``; ``similarity`` when it updated).

    Raises:
        MemoryInputError: bad text or category.
        memories.vectors.VectorError: the embedding must not be stored (nothing is).
        openmates.llm.LLMError: the embedding model failed.
        openmates.vault.VaultError: Vault unusable for the user's memory key.
    """
    written = await _awrite(
        instance=instance,
        user_id=user_id,
        category=category,
        content=content,
        source_chat_id=source_chat_id,
        dedup=True,
    )
    return _written(written)


# ``(user_id, instance_id, chat_id) -> bool``: whether the chat is the user's in that
# instance. Chats sit above memories (docs/architecture.md §2), so the pipeline app,
# which joins the two, installs it at start-up (:func:`source_chat_check_set`).
SourceChatCheck = Callable[[int, int, str], bool]
_source_chat_check: SourceChatCheck | None = None


def source_chat_check_set(check: SourceChatCheck | None) -> None:
    """Install the check a user-written memory's ``source_chat_id`` must pass (``None``
    removes it: every source chat is then refused)."""
    global _source_chat_check
    _source_chat_check = check


async def amemory_create(
    *, instance: Any, user_id: int, category: str, content: str, source_chat_id: str = ""
) -> Memory:
    """Insert a memory the user wrote themselves (no dedup: they asked for this one).

    Raises:
        MemoryInputError: also for a ``source_chat_id`` that names no chat of the user's
            in ``instance`` (a memory must not point at someone else's chat).
        Others: as :func:`amemory_upsert`.
    """
    if source_chat_id:
        check = _source_chat_check
        chat_id = _source_chat_clean(source_chat_id)
        if check is None or not await db_call(check, int(user_id), instance.pk, chat_id):
            raise MemoryInputError(
                "source_chat_id names no chat of yours in this instance", field="source_chat_id"
            )
    written = await _awrite(
        instance=instance,
        user_id=user_id,
        category=category,
        content=content,
        source_chat_id=source_chat_id,
        dedup=False,
    )
    return _written(written).memory


async def amemory_update(
    *,
    instance: Any,
    user_id: int,
    memory_id: str,
    category: str | None = None,
    content: str | None = None,
) -> Memory | None:
    """Change a memory's text (re-embedded, re-indexed, re-sealed) and/or its category.

    Returns the memory, or ``None`` when it is not the user's (or does not exist).

    Raises: as :func:`amemory_upsert`.
    """
    try:
        wanted = uuid.UUID(str(memory_id))
    except ValueError:
        return None
    if content is None:
        checked = category_check(category) if category is not None else None
        return await db_call(_category_set, instance.pk, int(user_id), wanted, checked)
    if category is None:
        current = await db_call(_category_get, instance.pk, int(user_id), wanted)
        if current is None:
            return None
        category = current
    written = await _awrite(
        instance=instance,
        user_id=user_id,
        category=category,
        content=content,
        source_chat_id="",
        dedup=False,
        memory_id=wanted,
    )
    return None if written is None else written.memory


def _category_get(instance_id: int, user_id: int, memory_id: uuid.UUID) -> str | None:
    found = (
        Memory.objects.filter(pk=memory_id, instance_id=instance_id, user_id=user_id)
        .values_list("category", flat=True)
        .first()
    )
    return None if found is None else str(found)


def _category_set(
    instance_id: int, user_id: int, memory_id: uuid.UUID, category: str | None
) -> Memory | None:
    with transaction.atomic():
        found = (
            Memory.objects.select_for_update()
            .filter(pk=memory_id, instance_id=instance_id, user_id=user_id)
            .first()
        )
        if found is not None and category is not None and category != found.category:
            found.category = category
            found.save(update_fields=["category", "updated_at"])
        return found


def memory_delete(*, instance_id: int, user_id: int, memory_id: str) -> bool:
    """Delete one memory of the user; False when it is not theirs (or does not exist)."""
    try:
        wanted = uuid.UUID(str(memory_id))
    except ValueError:
        return False
    deleted, _ = Memory.objects.filter(pk=wanted, instance_id=instance_id, user_id=user_id).delete()
    return deleted > 0


def memory_settings_set(*, instance_id: int, user_id: int, enabled: bool) -> MemorySettings:
    """Turn the user's memory in the instance on or off; returns the settings row."""
    found, _ = MemorySettings.objects.update_or_create(
        instance_id=instance_id, user_id=user_id, defaults={"enabled": bool(enabled)}
    )
    return found


def memories_forget(*, instance_id: int, user_id: int) -> int:
    """Forget everything the instance remembers of the user: a crypto-shred, then the rows.

    Under the settings row's lock: the transit key of the current generation is deleted
    (every sealed text and the blind-index secret under it are gone, backups included),
    the rows are deleted and the generation moves on, so a new memory gets a fresh key.
    Returns how many memories were deleted. The memory switch stays as it was.

    Raises:
        openmates.vault.VaultError: Vault could not delete the key; nothing was deleted.
    """
    with transaction.atomic():
        owner = (
            MemorySettings.objects.select_for_update()
            .filter(instance_id=instance_id, user_id=user_id)
            .first()
        )
        if owner is None:
            return 0
        keys.key_shred(
            keys.key_name(instance_id=instance_id, user_id=user_id, generation=owner.key_generation)
        )
        deleted, _ = Memory.objects.filter(instance_id=instance_id, user_id=user_id).delete()
        owner.key_generation += 1
        owner.save(update_fields=["key_generation", "updated_at"])
    logger.info("memories of user %s in instance %s forgotten", user_id, instance_id)
    return int(deleted)


def memory_consent_save(*, chat_id: str, user_id: int, answers: Mapping[str, str]) -> int:
    """Store the user's consent answers for a chat (category → ``allowed`` | ``denied``;
    other values, such as ``asked``, and unknown categories are left out), replacing
    earlier ones. Returns how many answers were stored (0 for an id that is not a UUID)."""
    try:
        wanted = uuid.UUID(str(chat_id))
    except ValueError:
        return 0
    decisions = set(MemoryConsent.Decision.values)
    rows = [
        MemoryConsent(chat_id=wanted, user_id=user_id, category=category, decision=decision)
        for category, decision in answers.items()
        if category in CATEGORIES and decision in decisions
    ]
    MemoryConsent.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["chat_id", "user", "category"],
        update_fields=["decision", "updated_at"],
    )
    return len(rows)


def memory_consent_forget(*, chat_id: str) -> None:
    """Delete a chat's consent answers (the chat is being deleted)."""
    try:
        wanted = uuid.UUID(str(chat_id))
    except ValueError:
        return
    MemoryConsent.objects.filter(chat_id=wanted).delete()


class MemoriesAccountData:
    """Memories' part in account deletion (``accounts.deletion``): shred the user's
    memory keys in every instance; the rows go with the user row's cascade."""

    name = "memories"

    def account_data_delete(self, *, user_id: int) -> None:
        """Delete every memory transit key of ``user_id`` (all instances, the current
        generation; older ones were deleted when they were forgotten).

        Raises:
            openmates.vault.VaultError: Vault could not delete one: the account stays.
        """
        for found in MemorySettings.objects.select_for_update().filter(user_id=user_id):
            keys.key_shred(
                keys.key_name(
                    instance_id=found.instance_id,
                    user_id=user_id,
                    generation=found.key_generation,
                )
            )


class MemoriesInstanceData:
    """Memories' part in instance deletion (``instances.extensions.InstanceDataOwner``):
    the memory keys of every user of the instance are shredded once it is deleted; the
    rows go with the instance row's cascade."""

    name = "memories"

    def instance_data_delete(self, instance: Any) -> Callable[[], None] | None:
        """Lock the instance's memory settings rows (a write in flight waits, then finds
        no instance) and return the shred of their current keys (older generations were
        deleted when they were forgotten), ``None`` when no user ever had a memory.

        The returned callable raises ``openmates.vault.VaultError`` when Vault could not
        delete a key (the others after it are then still to delete).
        """
        names = [
            keys.key_name(
                instance_id=instance.pk, user_id=found.user_id, generation=found.key_generation
            )
            for found in MemorySettings.objects.select_for_update().filter(instance_id=instance.pk)
        ]
        if not names:
            return None

        def shred() -> None:
            for name in names:
                keys.key_shred(name)
            logger.info("memory keys of %d users of instance %s shredded", len(names), instance.pk)

        return shred


async def afacts_save(*, instance: Any, user_id: int, chat_id: str, facts: Sequence[Fact]) -> int:
    """Upsert extracted facts (``memories.extraction``) one by one; returns how many were
    stored or updated. A fact that cannot be stored (bad text) is skipped and logged;
    embedding and Vault failures propagate (post-processing logs them).

    Raises: as :func:`amemory_upsert`, except ``MemoryInputError``.
    """
    saved = 0
    for fact in facts:
        try:
            await amemory_upsert(
                instance=instance,
                user_id=user_id,
                category=fact.category,
                content=fact.content,
                source_chat_id=chat_id,
            )
        except MemoryInputError as exc:
            logger.info("an extracted fact was not stored: %s", exc)
            continue
        saved += 1
    return saved
