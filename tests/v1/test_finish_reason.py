"""/v1's ``finish_reason``: a provider that stopped at its token limit says ``length``,
in the JSON answer and in the stream's last choice chunk (docs/api.md §3). In-process
(Django's async test client), the model scripted at the LiteLLM boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from accounts.instance_keys import instance_key_create

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("inprocess_turns"),
]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Cut short", "icon": "book", "category": "writing", "tags": []}'
POST = '{"follow_ups": ["More?"], "topic_changed": false, "summary": "Cut."}'


def _script(llm_script: Any, finish_reason: str) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text=["Once upon", " a time"], model="standard", finish_reason=finish_reason)
    llm_script.reply(text=POST, model="fast")


async def _post(key: str, **extra: Any) -> Any:
    body = {"model": "demo", "messages": [{"role": "user", "content": "Tell a story"}], **extra}
    return await AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


async def test_a_provider_length_reaches_the_answer_and_the_stream(
    instance: Any, llm_script: Any
) -> None:
    key = (await sync_to_async(instance_key_create)(instance=instance, name="k"))[1]
    _script(llm_script, "length")
    whole = await _post(key)
    _script(llm_script, "length")
    streamed = await _post(key, stream=True)
    raw = b"".join([chunk async for chunk in streamed.streaming_content]).decode()

    assert whole.status_code == 200
    answer = whole.json()["choices"][0]
    assert (answer["message"]["content"], answer["finish_reason"]) == ("Once upon a time", "length")
    events = [line[len("data: ") :] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length"
    assert [f for f in finishes if f is not None] == ["length"]


async def test_a_provider_stop_stays_stop(instance: Any, llm_script: Any) -> None:
    key = (await sync_to_async(instance_key_create)(instance=instance, name="k"))[1]
    _script(llm_script, "stop")
    whole = await _post(key)
    assert whole.json()["choices"][0]["finish_reason"] == "stop"
