"""Embedding vectors of memories: the write checks and the per-instance HNSW indexes.

``Memory.embedding`` is a ``vector`` column without a dimension. Each (instance,
dimension) gets a partial HNSW index (cosine) over the column cast to that dimension::

    CREATE INDEX memories_vec_i<instance>_d<dims> ON memories_memory
        USING hnsw ((embedding::vector(<dims>)) vector_cosine_ops) WITH (m, ef_construction)
        WHERE instance_id = <instance> AND vector_dims(embedding) = <dims>

and every query names the same expression and predicate, so PostgreSQL uses it. The
``vector`` type's HNSW stops at 2,000 dimensions; up to 4,000 the index is over
``halfvec`` instead, beyond that searches are exact. Rows of another dimension (during a
re-embedding after a model change) are outside the predicate: two indexes may coexist
until ``manage.py reembed_memories`` drops the old one (docs/architecture.md §12).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from instances.services import ainstance_tier_secrets_get
from openmates import llm

TABLE = "memories_memory"
# HNSW parameters, chosen with bench/memory_search.py (100,000 memories of one user
# beside 100,000 of others, 384 dimensions, 2 cores): m 16 / ef_construction 64 reached
# recall@10 0.94 at ef_search 100 and 0.96 only at 200, whose vector list alone took
# 6.4 ms at the median; m 24 / ef_construction 100 gives 0.97 at ef_search 100 (4.7 ms)
# for twice the build time. A halfvec index was no faster to build or search.
HNSW_M = 24
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 100
MAX_VECTOR_INDEX_DIMS = 2000
MAX_HALFVEC_INDEX_DIMS = 4000
MAX_DIMS = 16000  # pgvector's limit for a stored vector

_ensured: set[tuple[str, int, int]] = set()  # (database alias, instance id, dims)


class VectorError(ValueError):
    """A vector that must not be stored: ``code`` is ``dimension_mismatch``,
    ``non_finite``, ``zero_vector`` or ``count_mismatch`` (not one vector per text); the
    message says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def vector_check(vector: Sequence[float], *, dims: int) -> list[float]:
    """``vector`` as a list of floats, if it may be stored for an instance of ``dims``.

    Raises:
        VectorError: a length other than ``dims`` (``dimension_mismatch``), a NaN or an
            infinity (``non_finite``), or all zeros (``zero_vector``: cosine distance to
            it is undefined).
    """
    values = [float(x) for x in vector]
    if len(values) != dims:
        raise VectorError(
            "dimension_mismatch",
            f"the embedding has {len(values)} dimensions; this instance stores {dims}",
        )
    if not all(math.isfinite(x) for x in values):
        raise VectorError("non_finite", "the embedding holds a NaN or an infinite value")
    if not any(values):
        raise VectorError("zero_vector", "the embedding is all zeros")
    return values


async def aembed(instance: Any, texts: list[str]) -> list[list[float]]:
    """One checked vector per text from the instance's embedding model (``openmates.llm``:
    the packaged local model in-process, any other through LiteLLM with the instance's key).

    Raises:
        openmates.llm.LLMError: the model failed.
        VectorError: a vector that must not be stored (:func:`vector_check`; a wrong
            dimension is ``dimension_mismatch`` whichever check finds it).
    """
    if not texts:
        return []
    secrets = await ainstance_tier_secrets_get(instance=instance)
    try:
        vectors = await llm.embed(texts, instance=instance, secrets=secrets)
    except llm.EmbeddingDimensionError as exc:
        raise VectorError(
            "dimension_mismatch",
            f"the embedding has {exc.got} dimensions; this instance stores {exc.expected}",
        ) from exc
    if len(vectors) != len(texts):
        raise VectorError(
            "count_mismatch", f"{len(vectors)} embeddings came back for {len(texts)} texts"
        )
    dims = int(instance.embedding_dimensions)
    return [vector_check(vector, dims=dims) for vector in vectors]


def vector_literal(vector: Sequence[float]) -> str:
    """The pgvector text form ``[x,y,…]`` (``repr`` of each float: nothing is rounded)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _cast(dims: int) -> str:
    if dims <= MAX_VECTOR_INDEX_DIMS:
        return f"vector({dims})"
    return f"halfvec({dims})"


def column_expression(dims: int) -> str:
    """The SQL expression an instance of ``dims`` orders by (the indexed one)."""
    return f"(embedding::{_cast(int(dims))})"


def query_expression(dims: int) -> str:
    """The placeholder of a query vector of ``dims``, cast like :func:`column_expression`."""
    return f"%s::{_cast(int(dims))}"


def index_predicate(instance_id: int, dims: int) -> str:
    """The partial-index predicate; queries repeat it word for word."""
    return f"instance_id = {int(instance_id)} AND vector_dims(embedding) = {int(dims)}"


def index_name(instance_id: int, dims: int) -> str:
    """``memories_vec_i<instance>_d<dims>``."""
    return f"memories_vec_i{int(instance_id)}_d{int(dims)}"


def indexable(dims: int) -> bool:
    """Whether pgvector's HNSW can index vectors of ``dims`` (as vector or halfvec)."""
    return 0 < dims <= MAX_HALFVEC_INDEX_DIMS


def vector_index_exists(instance_id: int, dims: int) -> bool:
    """Whether the instance's index for ``dims`` exists in the current database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_class WHERE relname = %s AND relkind = 'i'",
            [index_name(instance_id, dims)],
        )
        return cursor.fetchone() is not None


def vector_index_ensure(instance_id: int, dims: int) -> bool:
    """Create the instance's HNSW index for ``dims`` when it is missing; True if created.

    Cheap once it exists (a catalog look-up, then remembered per process once the
    creating transaction commits). Call it outside the transactions that write rows: it
    takes a transaction of its own (a savepoint inside another) with an advisory lock on
    the index name, so two first writes of a new instance do not both build it, and the
    build's table lock is not held beside a writer's row locks. Building reads the
    instance's rows of that dimension, so the first write of a new instance builds an
    empty index at once; ``reembed_memories`` builds the big ones. Nothing for
    dimensions HNSW cannot index.
    """
    slot = (connection.alias, int(instance_id), int(dims))
    if slot in _ensured or not indexable(dims):
        return False
    name = index_name(instance_id, dims)
    ops = "vector_cosine_ops" if dims <= MAX_VECTOR_INDEX_DIMS else "halfvec_cosine_ops"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])
        if vector_index_exists(instance_id, dims):
            _ensured.add(slot)
            return False
        cursor.execute(
            f"CREATE INDEX {name} ON {TABLE} "
            f"USING hnsw ({column_expression(dims)} {ops}) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
            f"WHERE {index_predicate(instance_id, dims)}"
        )
        transaction.on_commit(lambda: _ensured.add(slot))
    return True


def vector_index_drop(instance_id: int, dims: int) -> None:
    """Drop the instance's index for ``dims`` (after its rows moved to another model)."""
    _ensured.discard((connection.alias, int(instance_id), int(dims)))
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {index_name(instance_id, dims)}")


def vector_index_dims(instance_id: int) -> list[int]:
    """The dimensions the instance has an index for (from the catalog)."""
    prefix = f"memories_vec_i{int(instance_id)}_d"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname LIKE %s",
            [prefix.replace("_", r"\_") + "%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    return sorted(int(name[len(prefix) :]) for name in names if name[len(prefix) :].isdigit())


def search_settings_apply(*, ef_search: int | None = None) -> None:
    """Set this transaction's HNSW search parameters (``SET LOCAL``; call inside atomic);
    ``ef_search`` defaults to :data:`HNSW_EF_SEARCH`.

    ``hnsw.iterative_scan = relaxed_order`` makes the index scan go on past ``ef_search``
    candidates until the per-user filter has yielded the rows asked for; callers re-sort
    by distance.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            [str(int(ef_search or HNSW_EF_SEARCH))],
        )
