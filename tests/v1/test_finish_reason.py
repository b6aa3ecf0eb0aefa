"""/v1's ``finish_reason``: a provider that stopped at its token limit says ``length``,
in the JSON answer and in the stream's last choice chunk (docs/api.md §3). In-process
(Django's async test client), the model scripted at the LiteLLM boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from accounts.instance_keys import instance_key_create
from tests.v1.inprocess import script_v1_turn, v1_post

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("inprocess_turns"),
]


async def test_a_provider_length_reaches_the_answer_and_the_stream(
    instance: Any, llm_script: Any
) -> None:
    key = (await sync_to_async(instance_key_create)(instance=instance, name="k"))[1]
    script_v1_turn(llm_script, ["Once upon", " a time"], finish_reason="length")
    whole = await v1_post(key)
    script_v1_turn(llm_script, ["Once upon", " a time"], finish_reason="length")
    streamed = await v1_post(key, stream=True)
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
    script_v1_turn(llm_script, ["Once upon", " a time"], finish_reason="stop")
    whole = await v1_post(key)
    assert whole.json()["choices"][0]["finish_reason"] == "stop"
