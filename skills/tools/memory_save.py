# ruff: noqa: RUF001 (patterns in many scripts: their look-alike letters are meant; long alternations)
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
    except VectorError as exc:
        return {
            "success": False,
            "error": f"the embedding model answered an unusable vector: {exc}",
        }
    except llm.LLMError:
        return {"success": False, "error": "the embedding model is unavailable"}
    except vault.VaultError:
        return {"success": False, "error": "memories cannot be saved right now"}
    status = "saved" if written.created else "updated"
    return {"success": True, "result": {"id": str(written.memory.pk), "status": status}}


# Preselection (docs/architecture.md §6): requests in several languages, and the
# imperatives that ask to keep a fact ("remember that I…", "merk dir", "retiens que").
# "Remember when…" nostalgia and "remember to…" reminders ask for nothing to be kept.
EXAMPLES = (
    "Remember that I live in Leeds.",
    "Please save this to your memory: I'm a night-shift nurse.",
    "Merk dir, dass ich zwei Kinder habe.",
    "Retiens que mon anniversaire est le 2 mars.",
    "Recuerda que no como carne.",
    "Ricordati che sono mancino.",
    "Lembre-se de que eu trabalho em casa.",
    "Запомни: мой сын учится в пятом классе.",
    "私は辛い料理が苦手だと覚えておいて。",
    "记住我女儿叫小美。",
)
TRIGGERS = (
    r"(?<!\byou )(?<!\bstill )\b(?:please\s+)?remember,?\s+(?:that\s+)?"
    r"(?:i\b|i'm\b|i've\b|my\b|mine\b)"
    r"|\b(?:don't|do not|never) forget (?:that|my)\b|\bkeep in mind (?:that|my)\b"
    r"|\b(?:save|store|put|add|keep|note)\b[^.?!]{0,20}\b(?:to|in|into) (?:your |the )?memory\b"
    r"|\bmake a note that\b|\bnote (?:down )?that (?:i|my)\b",
    r"\bmerke? dir\b|\bvergiss nicht,? dass\b|\bbehalte? im (?:kopf|hinterkopf)\b"
    r"|\bspeicher(?:e|n)? (?:dir )?,? ?dass\b|\bnotier(?:e)? dir\b",
    r"\bretiens (?:que|bien)\b|\bsouviens-toi que\b|\bn'oublie pas que\b|\bmémorise\b"
    r"|\bgarde en (?:tête|mémoire) que\b|\bnote que (?:je|j'|mon|ma|mes)\b",
    r"\brecuerda que\b|\bno olvides que\b|\bmemoriza\b|\bten en cuenta que\b"
    r"|\bapunta que\b|\bguarda en (?:tu )?memoria\b",
    r"\bricorda(?:ti)? che\b|\bnon dimenticare che\b|\bmemorizza\b|\btieni a mente che\b",
    r"\blembr(?:e|a)(?:-se)? (?:de )?que\b|\bnão (?:se )?esqueça (?:de )?que\b|\bmemorize\b",
    r"\bonthoud (?:dat|dit|goed)\b|\bzapamiętaj\b|\bnie zapomnij,? że\b",
    r"\bзапомни\b|\bне забудь,? что\b|\bимей в виду,? что\b",
    r"覚えておいて|覚えといて|覚えておいてください|記憶しておいて|记住|記住|记下来|記下來",
)


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
    examples=EXAMPLES,
    triggers=TRIGGERS,
)
