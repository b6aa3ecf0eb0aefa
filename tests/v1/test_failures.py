"""/v1 never answers Django's HTML 500 (docs/api.md §3): a service outage is 503
``server_error`` with ``Retry-After``, any other failure 500 ``internal_error``, both
OpenAI-shaped JSON without the failure's own text; a failure after a stream started ends
it with an ``{"error": …}`` event and ``data: [DONE]``. In-process (Django's async test
client), the model scripted at the LiteLLM boundary."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async

from accounts.instance_keys import instance_key_create
from chats.models import Chat, Message
from openai_api import quotas, views
from openmates.vault import VaultError
from pipeline import events as ev
from pipeline.server_turn import ServerTurn
from tests.v1.inprocess import script_v1_turn, v1_post

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("inprocess_turns"),
]

SECRET_DETAIL = "vault at 10.9.8.7 said token s.abcdef"


async def _key(instance: Any) -> str:
    return (await sync_to_async(instance_key_create)(instance=instance, name="k"))[1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _events(response: Any) -> list[str]:
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    return [part[len("data: ") :] for part in raw.split("\n\n") if part.startswith("data: ")]


def _assert_json_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["type"], body["error"]["code"]) == ("server_error", code)
    return dict(body["error"])


@pytest.mark.parametrize("stream", [False, True])
async def test_redis_down_at_the_limit_check_is_503_with_retry_after(
    instance: Any, settings: Any, stream: bool
) -> None:
    key = await _key(instance)
    settings.REDIS_URL = f"redis://127.0.0.1:{_closed_port()}/0"

    response = await v1_post(key, stream=stream)

    error = _assert_json_error(response, 503, "cache_unavailable")
    assert error["message"] == "The cache is unavailable; try again shortly."
    assert response["Retry-After"] == str(views.OUTAGE_RETRY_AFTER_S)
    assert not await Chat.objects.filter(instance=instance).aexists()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_vault_outage_is_503_and_a_bug_500_without_their_text(
    instance: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any, stream: bool
) -> None:
    key = await _key(instance)
    failures = [VaultError("unreachable", SECRET_DETAIL), RuntimeError(SECRET_DETAIL)]

    async def failing_start(inp: Any) -> Any:
        raise failures.pop(0)

    monkeypatch.setattr(views, "server_turn_start", failing_start)
    with caplog.at_level(logging.WARNING, logger="openai_api.views"):
        outage = await v1_post(key, stream=stream)
        bug = await v1_post(key, stream=stream)

    _assert_json_error(outage, 503, "vault_unavailable")
    assert outage["Retry-After"] == str(views.OUTAGE_RETRY_AFTER_S)
    error = _assert_json_error(bug, 500, "internal_error")
    assert error["message"] == "Something went wrong on the server."
    assert "Retry-After" not in bug
    assert SECRET_DETAIL not in outage.content.decode() + bug.content.decode()
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert [type(r.exc_info[1]) for r in logged] == [VaultError, RuntimeError]


def _events_failing_after_first_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ServerTurn.events`` raising once the turn's first text came (a failure in the
    middle of a turn that is still running)."""
    real = ServerTurn.events

    async def events(self: ServerTurn, *, until_done: bool = False) -> AsyncIterator[Any]:
        async for event in real(self, until_done=until_done):
            yield event
            if isinstance(event, ev.ReplyDelta) and event.text:
                raise RuntimeError(SECRET_DETAIL)

    monkeypatch.setattr(ServerTurn, "events", events)


async def _reply_status(chat_id: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        reply = await Message.objects.filter(chat_id=chat_id, role="assistant").aget()
        if reply.status != "pending" or time.monotonic() > deadline:
            return str(reply.status)
        await sync_to_async(time.sleep)(0.1)


async def test_a_failure_mid_stream_ends_it_with_an_error_event_and_done(
    instance: Any, llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await _key(instance)
    script_v1_turn(llm_script, ["One", " two", " three"], delay_s=0.2)
    _events_failing_after_first_text(monkeypatch)

    response = await v1_post(key, stream=True)
    events = await _events(response)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""},
        {"content": "One"},
    ]
    assert chunks[2] == {
        "error": {
            "message": "Something went wrong on the server.",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    assert len(chunks) == 3
    assert await _reply_status(response[views.CONVERSATION_HEADER]) == "cancelled"


async def test_a_failure_while_a_non_streaming_turn_runs_is_500_json(
    instance: Any, llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await _key(instance)
    script_v1_turn(llm_script, ["One", " two", " three"], delay_s=0.2)
    _events_failing_after_first_text(monkeypatch)

    response = await v1_post(key)

    _assert_json_error(response, 500, "internal_error")
    chat = await Chat.objects.filter(instance=instance).aget()
    assert await _reply_status(chat.pk) == "cancelled"


async def test_tokens_that_cannot_be_counted_still_answer(
    instance: Any, llm_script: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    key = await _key(instance)
    script_v1_turn(llm_script, ["Counted or not."])

    async def redis_down(**kwargs: Any) -> None:
        raise redis.ConnectionError("Redis went away")

    monkeypatch.setattr(quotas, "atokens_add", redis_down)
    with caplog.at_level(logging.ERROR, logger="openai_api.views"):
        response = await v1_post(key)

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Counted or not."
    assert any("could not be counted" in r.getMessage() for r in caplog.records)
