"""Hybrid search over one user's memories (docs/architecture.md §12).

Two ranked lists, each of at most :data:`LIST_TOP_K` memory ids of that user in that
instance:

* **vector**: the query (without its exclusions) embedded by the instance's model,
  nearest memories by cosine distance through the instance's HNSW index
  (``memories.vectors``; ``hnsw.iterative_scan`` set for the query, so the per-user
  filter still yields k rows), memories holding an exclusion of every OR group left out;
* **keyword**: the query parsed like ``websearch_to_tsquery('simple', …)``
  (``memories.blind_index``) into blind-index tokens of the user's key; PostgreSQL finds
  the memories that satisfy it (GIN index on ``blind_index``), takes at most
  :data:`KEYWORD_CANDIDATES` of them and only then ranks those by how many of the query's
  terms they hold (newest first among equals).

Both lists are one round trip to PostgreSQL and bring their candidates' ciphertext
along; they are fused by reciprocal rank fusion (:func:`rrf_fuse`, k = 60) and only the
final ``limit`` results are decrypted. A query with nothing to look for (empty,
punctuation, emoji, only exclusions) gives no results: neither list has anything to
search with.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection

from memories import blind_index, keys, selectors, vectors
from memories.blind_index import KeywordQuery
from openmates import vault
from openmates.db import db_call

RRF_K = 60
LIST_TOP_K = 40
KEYWORD_CANDIDATES = 500
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
# What retrieval for a prompt puts in at most (characters, about 500 tokens).
PROMPT_MEMORY_CHARS = 2000
PROMPT_MEMORY_LIMIT = 8
# The relevance floor of retrieval for a prompt: a memory found by its vector alone
# enters only at this cosine similarity to the message or more (the keyword list holds
# memories with every word of the message, relevant by construction). Set with the
# packaged all-MiniLM-L6-v2: related English pairs ("what should I cook for dinner?" /
# "Alice is vegetarian") score 0.19-0.3, unrelated ones below 0.15. That model knows
# English: two texts of another language score 0.3-0.6 whatever they say, so there the
# floor keeps out only other languages' memories (docs/architecture.md §12).
PROMPT_MIN_SIMILARITY = 0.15

K = TypeVar("K", bound=Hashable)


def rrf_fuse(ranked_lists: Sequence[Sequence[K]], *, k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal rank fusion: each id scores the sum over lists of ``1 / (k + rank)``.

    Ranks start at 1; an id repeated within one list counts once, at its best rank; an
    empty list adds nothing. Returns ``[(id, score)]`` without duplicates, best first;
    equal scores keep the order of the best rank, then of the earlier list.
    """
    scores: dict[K, float] = {}
    best: dict[K, tuple[int, int]] = {}
    for position, ranked in enumerate(ranked_lists):
        seen: set[K] = set()
        for rank, key in enumerate(ranked, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            best[key] = min(best.get(key, (rank, position)), (rank, position))
    return sorted(scores.items(), key=lambda item: (-item[1], best[item[0]]))


@dataclass(frozen=True)
class SearchHit:
    """One result: the memory's metadata, its text and its fused score."""

    memory_id: str
    category: str
    content: str
    score: float
    source_chat_id: str
    created_at: datetime
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (ISO timestamps)."""
        return {
            "id": self.memory_id,
            "category": self.category,
            "content": self.content,
            "score": self.score,
            "source_chat_id": self.source_chat_id or None,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def _filters(categories: Sequence[str] | None) -> tuple[str, list[Any]]:
    if categories is None:
        return "", []
    return " AND category = ANY(%s)", [list(categories)]


def _exclusions(token_sets: Sequence[list[int]]) -> tuple[str, list[Any]]:
    return "".join(" AND NOT (blind_index @> %s::bigint[])" for _ in token_sets), list(token_sets)


# What both lists return of each memory: enough to show the winners without another query.
_COLUMNS = "id, category, content_sealed, source_chat_id, created_at, updated_at"
Statement = tuple[str, list[Any]]


def _settings_statement() -> Statement:
    # SET LOCAL semantics: inside a transaction until it ends; sent with the query in one
    # message outside one, in the implicit transaction PostgreSQL gives that message.
    return (
        "SELECT set_config('hnsw.ef_search', %s, true), "
        "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        [str(vectors.HNSW_EF_SEARCH)],
    )


def _vector_statement(
    *,
    instance: Any,
    user_id: int,
    vector: list[float],
    categories: Sequence[str] | None,
    excluded: Sequence[list[int]],
    top_k: int,
    min_similarity: float | None = None,
) -> Statement:
    dims = int(instance.embedding_dimensions)
    expression = vectors.column_expression(dims)
    query = vectors.query_expression(dims)
    where, params = _filters(categories)
    excluded_sql, excluded_params = _exclusions(excluded)
    literal = vectors.vector_literal(vector)
    floor_sql, floor_params = "", []
    if min_similarity is not None:
        floor_sql, floor_params = " WHERE distance <= %s", [1.0 - float(min_similarity)]
    sql = (
        f"WITH nearest AS MATERIALIZED (SELECT {_COLUMNS}, {expression} <=> {query} AS distance "  # noqa: S608 (integers and constants only)
        f"FROM {vectors.TABLE} WHERE {vectors.index_predicate(instance.pk, dims)} "
        f"AND user_id = %s AND embedding_model = %s{where}{excluded_sql} "
        f"ORDER BY {expression} <=> {query} LIMIT %s) "
        f"SELECT {_COLUMNS} FROM nearest{floor_sql} ORDER BY distance, id"
    )
    args = [literal, int(user_id), str(instance.embedding_model), *params, *excluded_params]
    return sql, [*args, literal, top_k, *floor_params]


def _keyword_statement(
    *,
    instance_id: int,
    user_id: int,
    query: KeywordQuery,
    secret: bytes,
    categories: Sequence[str] | None,
    top_k: int,
    candidates: int,
) -> Statement:
    groups: list[str] = []
    params: list[Any] = []
    for group in query.groups:
        required = [t for op in group.required for t in op.terms]
        excluded_sql, excluded_params = _exclusions(
            [blind_index.tokens(secret, op.terms) for op in group.excluded]
        )
        groups.append(f"(blind_index @> %s::bigint[]{excluded_sql})")
        params += [blind_index.tokens(secret, required), *excluded_params]
    where, filter_params = _filters(categories)
    ranked = blind_index.tokens(secret, query.positive_terms())
    sql = (
        f"SELECT {_COLUMNS} FROM (SELECT {_COLUMNS}, blind_index "  # noqa: S608 (placeholders only)
        f"FROM {vectors.TABLE} WHERE instance_id = %s AND user_id = %s{where} "
        f"AND ({' OR '.join(groups)}) LIMIT %s) c "
        "ORDER BY (SELECT count(*) FROM unnest(c.blind_index) t "
        "WHERE t = ANY(%s::bigint[])) DESC, updated_at DESC, id LIMIT %s"
    )
    head = [int(instance_id), int(user_id), *filter_params, *params]
    return sql, [*head, candidates, ranked, top_k]


def _results(statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
    """Run ``statements`` as one message (one round trip); the rows of each, in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "; ".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps]
        )
        results = [cursor.fetchall()]
        while cursor.nextset():
            results.append(cursor.fetchall())
    return results


def vector_ranked(
    *,
    instance: Any,
    user_id: int,
    vector: list[float],
    categories: Sequence[str] | None = None,
    excluded: Sequence[list[int]] = (),
    top_k: int = LIST_TOP_K,
) -> list[str]:
    """The user's memory ids nearest to ``vector``, nearest first (the vector list)."""
    statement = _vector_statement(
        instance=instance,
        user_id=user_id,
        vector=vector,
        categories=categories,
        excluded=excluded,
        top_k=top_k,
    )
    return [str(row[0]) for row in _results([_settings_statement(), statement])[1]]


def keyword_ranked(
    *,
    instance_id: int,
    user_id: int,
    query: KeywordQuery,
    secret: bytes,
    categories: Sequence[str] | None = None,
    top_k: int = LIST_TOP_K,
    candidates: int = KEYWORD_CANDIDATES,
) -> list[str]:
    """The user's memory ids matching ``query``, best first (the keyword list); ``[]``
    for an empty query."""
    if query.empty:
        return []
    statement = _keyword_statement(
        instance_id=instance_id,
        user_id=user_id,
        query=query,
        secret=secret,
        categories=categories,
        top_k=top_k,
        candidates=candidates,
    )
    return [str(row[0]) for row in _results([statement])[0]]


def _search_key(instance: Any, user_id: int, generation: int | None) -> str | None:
    if generation is None:
        found = selectors.memory_settings_get(instance_id=instance.pk, user_id=user_id)
        if found is None:
            return None
        generation = found.key_generation
    return keys.key_name(instance_id=instance.pk, user_id=user_id, generation=generation)


def _search_statements(
    *,
    instance: Any,
    user_id: int,
    parsed: KeywordQuery,
    secret: bytes,
    vector: list[float] | None,
    categories: Sequence[str] | None,
    min_similarity: float | None = None,
) -> list[Statement]:
    """[settings, vector list, keyword list], or only the keyword list without a vector."""
    keyword = _keyword_statement(
        instance_id=instance.pk,
        user_id=user_id,
        query=parsed,
        secret=secret,
        categories=categories,
        top_k=LIST_TOP_K,
        candidates=KEYWORD_CANDIDATES,
    )
    if vector is None:
        return [keyword]
    excluded = [blind_index.tokens(secret, op.terms) for op in parsed.excluded_everywhere]
    nearest = _vector_statement(
        instance=instance,
        user_id=user_id,
        vector=vector,
        categories=categories,
        excluded=excluded,
        top_k=LIST_TOP_K,
        min_similarity=min_similarity,
    )
    return [_settings_statement(), nearest, keyword]


def hybrid_search(
    *,
    instance: Any,
    user_id: int,
    query: str,
    vector: list[float] | None,
    limit: int = DEFAULT_LIMIT,
    categories: Sequence[str] | None = None,
    generation: int | None = None,
    min_similarity: float | None = None,
) -> list[SearchHit]:
    """The user's ``limit`` best memories for ``query`` (module docstring), best first.

    ``vector`` is the embedding of ``parse_query(query).positive_text`` (None: no vector
    side); ``generation`` the user's key generation when the caller has just read it
    (None: read here); ``min_similarity`` (None: none) leaves memories of a lower cosine
    similarity to ``vector`` out of the vector list. Sync ORM code: both lists in one
    round trip, returning the candidates' ciphertext, so only the winners' decryption
    follows.

    Raises:
        openmates.crypto.DecryptionError: a winner does not open.
        openmates.vault.VaultError: a cold key and Vault unusable.
    """
    parsed = blind_index.parse_query(query)
    key = _search_key(instance, user_id, generation) if not parsed.empty else None
    if key is None:
        return []
    try:
        secret = keys.blind_secret(key)
    except vault.VaultError as exc:
        if exc.reason != "not_found":
            raise
        return []  # the key is made with the first memory: none was ever stored
    statements = _search_statements(
        instance=instance,
        user_id=user_id,
        parsed=parsed,
        secret=secret,
        vector=vector,
        categories=categories,
        min_similarity=min_similarity,
    )
    found = _results(statements)
    lists = found[1:] if vector is not None else [[], *found]
    rows = {str(row[0]): row for candidates in lists for row in candidates}
    ranked = [[str(row[0]) for row in candidates] for candidates in lists]
    fused = rrf_fuse(ranked)[: max(1, min(int(limit), MAX_LIMIT))]
    return [_hit(key, user_id, rows[memory_id], score) for memory_id, score in fused]


def _hit(key: str, user_id: int, row: tuple[Any, ...], score: float) -> SearchHit:
    memory_id, category, sealed, source_chat_id, created_at, updated_at = row
    text = keys.content_open(
        key=key, user_id=user_id, memory_id=str(memory_id), sealed=bytes(sealed)
    )
    return SearchHit(
        memory_id=str(memory_id),
        category=category,
        content=text,
        score=score,
        source_chat_id=source_chat_id,
        created_at=created_at,
        updated_at=updated_at,
    )


async def ahybrid_search(
    *,
    instance: Any,
    user_id: int,
    query: str,
    limit: int = DEFAULT_LIMIT,
    categories: Sequence[str] | None = None,
) -> list[SearchHit]:
    """:func:`hybrid_search` with the query embedded first (nothing is embedded for a
    user without memories or a query with nothing to look for).

    Raises: as :func:`hybrid_search`, and ``openmates.llm.LLMError`` /
    ``memories.vectors.VectorError`` from embedding the query.
    """
    return await _asearch(
        instance=instance,
        user_id=int(user_id),
        query=query,
        limit=limit,
        categories=categories,
        enabled_only=False,
    )


async def _asearch(
    *,
    instance: Any,
    user_id: int,
    query: str,
    limit: int,
    categories: Sequence[str] | None,
    enabled_only: bool,
    min_similarity: float | None = None,
) -> list[SearchHit]:
    """Parse, read the user's settings, embed the query's positive words, search; nothing
    is read for a query with nothing to look for, nothing embedded for a user without
    memories (or, with ``enabled_only``, with memory off)."""
    parsed = blind_index.parse_query(query)
    if parsed.empty:
        return []
    found = await db_call(selectors.memory_settings_get, instance_id=instance.pk, user_id=user_id)
    if found is None or (enabled_only and not found.enabled):
        return []
    (vector,) = await vectors.aembed(instance, [parsed.positive_text])
    return await db_call(
        hybrid_search,
        instance=instance,
        user_id=user_id,
        query=query,
        vector=vector,
        limit=limit,
        categories=categories,
        generation=found.key_generation,
        min_similarity=min_similarity,
    )


async def amemories_for_prompt(
    *, user_id: int | str, instance: Any, query: str, categories: Sequence[str]
) -> list[str]:
    """The memory texts for a turn's prompt (``pipeline.prompts.memory_retriever_set``).

    Only the allowed ``categories``, only when the instance and the user have memory on,
    only memories above the relevance floor (:data:`PROMPT_MIN_SIMILARITY`, or matched by
    keyword); at most :data:`PROMPT_MEMORY_LIMIT` memories within
    :data:`PROMPT_MEMORY_CHARS` characters, best first. Without allowed categories, with
    the instance's memory off or a query with nothing to look for, nothing is read;
    otherwise one read of the user's settings (their switch and key generation), then the
    query's embedding (the packaged local model needs no model call) and the search's one
    round trip.

    Raises: as :func:`ahybrid_search` (the pipeline logs them and answers without
    memories).
    """
    if not categories or not instance.memory_enabled:
        return []
    hits = await _asearch(
        instance=instance,
        user_id=int(user_id),
        query=query,
        limit=PROMPT_MEMORY_LIMIT,
        categories=list(categories),
        enabled_only=True,
        min_similarity=PROMPT_MIN_SIMILARITY,
    )
    return prompt_texts(hits)


def prompt_texts(hits: Sequence[SearchHit], *, max_chars: int = PROMPT_MEMORY_CHARS) -> list[str]:
    """The texts of ``hits`` in order, as many as fit ``max_chars`` characters together
    (the first that does not fit ends the list: a lower-ranked one is not let in ahead)."""
    texts: list[str] = []
    used = 0
    for hit in hits:
        if used + len(hit.content) > max_chars:
            break
        texts.append(hit.content)
        used += len(hit.content)
    return texts
