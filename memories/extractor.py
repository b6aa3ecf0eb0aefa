"""The memory extraction hook of post-processing (docs/architecture.md §12).

``pipeline.apps`` installs :func:`amemories_extract` with
``pipeline.postprocess.memory_extractor_set``; post-processing calls it after
``stream.done`` with the finished exchange and reports what it returns as
``postprocess.done``'s ``memories_saved``. One ``fast``-tier call with a JSON schema
(:func:`memories.extraction.extraction_request`, facts written in the conversation's
language), its answer checked (:func:`memories.extraction.extraction_parse`), then every
fact embedded and upserted with dedup (:func:`memories.services.afacts_save`: cosine
similarity above 0.90 to one of the user's memories updates it, else it is inserted), so
the same conversation extracted twice stores its facts once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from instances.services import ainstance_tier_secrets_get
from memories import selectors, services
from memories.extraction import extraction_parse, extraction_request
from openmates import llm
from openmates.db import db_call

logger = logging.getLogger(__name__)


def extraction_wanted(*, instance: Any) -> bool:
    """Whether extraction may run for ``instance`` at all: its memory switch is on and
    its fast tier is not a base model (the bundled local model follows no JSON schema:
    ``openmates.llm.is_base_model``, the predicate pre- and post-processing use)."""
    return bool(instance.memory_enabled) and not llm.is_base_model(tier="fast", instance=instance)


async def amemories_extract(
    *,
    user_id: int,
    instance: Any,
    chat_id: str,
    messages: Sequence[Mapping[str, Any]],
    language: str,
) -> int:
    """Extract the facts worth remembering from ``messages`` and store them; returns how
    many were stored or updated (0 when extraction is off, module docstring).

    ``messages``: the exchange's ``{"role", "content"}`` dicts, oldest first; ``language``:
    the conversation's language by name ("German"). Off (no call, 0) for an instance on a
    base model or with memory off, and for a user who turned memory off.

    Raises:
        openmates.llm.LLMError: the fast call failed.
        memories.extraction.ExtractionFormatError: its answer is not ``{"facts": [...]}``.
        memories.vectors.VectorError, openmates.vault.VaultError: storing a fact failed
            (the facts before it stay stored).
    """
    if not messages or not extraction_wanted(instance=instance):
        return 0
    if not await db_call(selectors.memory_enabled, instance=instance, user_id=int(user_id)):
        return 0
    answer = await llm.complete(
        tier="fast",
        stage="postprocess",
        instance=instance,
        secrets=await ainstance_tier_secrets_get(instance=instance),
        chat_id=chat_id,
        **extraction_request(messages, language=language),
    )
    facts = extraction_parse(answer.data)
    if not facts:
        return 0
    saved = await services.afacts_save(
        instance=instance, user_id=int(user_id), chat_id=chat_id, facts=facts
    )
    logger.info("chat %s: %d of %d extracted facts stored", chat_id, saved, len(facts))
    return saved
