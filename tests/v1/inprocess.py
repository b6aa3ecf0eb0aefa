"""Helpers for the in-process /v1 tests (Django's async test client, the model scripted
at the LiteLLM boundary): one turn's scripted model calls and one request."""

from __future__ import annotations

import json
from typing import Any

from django.test import AsyncClient

SAFE = '{"harmful": 0, "misuse": 0}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'


def script_v1_turn(
    llm_script: Any, main: str | list[str], *, title: str = "Story", **main_options: Any
) -> None:
    """Script one first turn: the safety check, the title (``title``), the main answer
    ``main`` (a text or its streamed pieces; ``main_options`` such as ``delay_s`` or
    ``finish_reason`` go to its reply) and post-processing."""
    llm_script.reply(text=SAFE, model="fast")
    title_json = {"title": title, "icon": "book", "category": "writing", "tags": []}
    llm_script.reply(text=json.dumps(title_json), model="fast")
    llm_script.reply(text=main, model="standard", **main_options)
    llm_script.reply(text=POST, model="fast")


async def v1_post(key: str, *, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    """``POST /v1/chat/completions`` for the model ``demo`` with one user message ("Tell a
    story"), the body's other fields from ``extra``, the key as a Bearer token."""
    body = {"model": "demo", "messages": [{"role": "user", "content": "Tell a story"}], **extra}
    return await AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
    )
