"""``memory_search``: hybrid search over what the assistant remembers of the user
(``memories.search``: vector and blind-index keyword search fused by reciprocal rank)."""

from __future__ import annotations

from typing import Any

from memories import search
from memories.models import Memory
from memories.selectors import memory_instance_for_user
from memories.vectors import VectorError
from openmates import crypto, llm, vault
from openmates.db import db_call
from skills.registry import ToolContext, register_tool

DEFAULT_LIMIT = 5
MAX_LIMIT = 20


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Search the user's memories for ``query``; returns ``{"query", "memories": [...]}``."""
    query = str(params.get("query") or "").strip()
    if not query:
        return {"success": False, "error": "the query is empty"}
    instance = await db_call(
        memory_instance_for_user, instance_id=context.instance_id, user_id=context.user_id
    )
    if instance is None or context.user_id is None:
        return {"success": False, "error": "memory is turned off for this user"}
    category = params.get("category")
    try:
        hits = await search.ahybrid_search(
            instance=instance,
            user_id=context.user_id,
            query=query,
            limit=params.get("limit") or DEFAULT_LIMIT,
            categories=[category] if category else None,
        )
    except (llm.LLMError, VectorError):
        return {"success": False, "error": "the embedding model is unavailable"}
    except (vault.VaultError, crypto.DecryptionError):
        return {"success": False, "error": "the memories cannot be read right now"}
    memories = [
        {
            "category": hit.category,
            "content": hit.content,
            "saved": hit.updated_at.date().isoformat(),
        }
        for hit in hits
    ]
    return {"success": True, "result": {"query": query, "memories": memories}}


register_tool(
    name="memory_search",
    description=(
        "Search what you remember about this user from earlier conversations (preferences, "
        "facts, events, relationships, decisions). Words are matched exactly and by meaning; "
        'use "quotes" for a phrase, or, and -word to exclude.'
    ),
    category="memory",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": f"How many memories to return (1-{MAX_LIMIT}); null means 5.",
            },
            "category": {
                "type": ["string", "null"],
                "enum": [*Memory.Category.values, None],
                "description": "Only memories of this category; null means all.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    execute=execute,
)
