"""``web_search``: searches the web through Tavily's search API (needs ``TAVILY_API_KEY``)."""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from skills.registry import ToolContext, register_tool

API_KEY_SECRET = "TAVILY_API_KEY"  # noqa: S105 (a secret's name)
DEFAULT_MAX_RESULTS = 5
TIMEOUT_S = 15.0


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Search for ``query``; returns ``{"query", "results": [{title, url, content}]}``."""
    query = str(params.get("query") or "").strip()
    if not query:
        return {"success": False, "error": "the query is empty"}
    max_results = params.get("max_results") or DEFAULT_MAX_RESULTS
    body = {"query": query, "max_results": max_results, "search_depth": "basic"}
    headers = {"Authorization": f"Bearer {context.secrets[API_KEY_SECRET]}"}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.post(
                f"{settings.SKILLS_WEB_SEARCH_API_BASE.rstrip('/')}/search",
                json=body,
                headers=headers,
            )
        if response.status_code != httpx.codes.OK:
            return {"success": False, "error": f"search failed: HTTP {response.status_code}"}
        found = response.json().get("results", [])
    except (httpx.HTTPError, ValueError) as exc:
        return {"success": False, "error": f"search failed: {type(exc).__name__}"}
    results = [
        {
            "title": str(item.get("title", "")),
            "url": str(item.get("url", "")),
            "content": str(item.get("content", ""))[:2000],
        }
        for item in found[:max_results]
        if isinstance(item, dict)
    ]
    return {"success": True, "result": {"query": query, "results": results}}


register_tool(
    name="web_search",
    description="Search the web for current information; returns titles, URLs and excerpts.",
    category="web",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "max_results": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 10,
                "description": "How many results to return (1-10); null means 5.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    execute=execute,
    required_secrets=(API_KEY_SECRET,),
)
