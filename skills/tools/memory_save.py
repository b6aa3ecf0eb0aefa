"""``memory_save``: remember a fact about the user for later conversations
(``memories.services.amemory_upsert``: a near-duplicate, cosine similarity > 0.90, is
updated instead of stored twice). It writes, so it is registered as not idempotent."""

from __future__ import annotations

from typing import Any

from memories import services
from memories.models import Memory
from memories.selectors import memory_instance_for_user
from memories.vectors import VectorError
from openmates import llm, vault
from openmates.db import db_call
from skills.registry import ToolContext, register_tool


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Save ``content`` (category ``general`` unless given); returns ``{"id", "status"}``
    with status ``saved`` or ``updated`` (it replaced a near-duplicate)."""
    instance = await db_call(
        memory_instance_for_user, instance_id=context.instance_id, user_id=context.user_id
    )
    if instance is None or context.user_id is None:
        return {"success": False, "error": "memory is turned off for this user"}
    try:
        written = await services.amemory_upsert(
            instance=instance,
            user_id=context.user_id,
            category=params.get("category") or Memory.Category.GENERAL,
            content=str(params.get("content") or ""),
            source_chat_id=context.chat_id or "",
        )
    except services.MemoryInputError as exc:
        return {"success": False, "error": str(exc)}
    except (llm.LLMError, VectorError):
        return {"success": False, "error": "the embedding model is unavailable"}
    except vault.VaultError:
        return {"success": False, "error": "memories cannot be saved right now"}
    status = "saved" if written.created else "updated"
    return {"success": True, "result": {"id": str(written.memory.pk), "status": status}}


register_tool(
    name="memory_save",
    description=(
        "Remember one fact about the user for later conversations, when they tell you "
        "something lasting (a preference, a fact about them, an event, a relationship, a "
        "decision) or ask you to remember it. One short, self-contained sentence."
    ),
    category="memory",
    parameters={
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": services.MAX_CONTENT_CHARS,
                "description": "The fact, as one self-contained sentence in the user's language.",
            },
            "category": {
                "type": ["string", "null"],
                "enum": [*Memory.Category.values, None],
                "description": "What kind of fact it is; null means general.",
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
    execute=execute,
    idempotent=False,
)
