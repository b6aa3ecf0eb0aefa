"""A Daphne process SIGKILLed mid-turn: the reaper fails its messages, retry answers them.

Two real Daphne processes on the test session's PostgreSQL, Redis and OpenBao (as in
``test_live_servers``), both with short turn TTLs (alive key 1 s, lease 3 s): a turn sent
through process B is streaming when B is killed with SIGKILL, so nothing of B's ends the
turn. Process A's heartbeat runs the reaper (``pipeline.runtime.reap_orphans``, on A's
first beat and every ``REAP_EVERY_S`` = 10 s after); once B's alive key has expired it
marks the user and assistant messages ``failed`` and tells the user's sockets
(``stream.done`` status ``failed``). ``message.retry`` through A then answers the message.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tests.pipeline.conftest import session_cookie
from tests.pipeline.test_live_servers import send_message, socket, streamed_text, until
from tests.ui.conftest import daphne_process, daphne_serving
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

REAPED_WITHIN_S = 20.0  # B's alive key (1 s) plus at most one reaper period (10 s) of A


def _server_env(model: UIModelServer) -> dict[str, str]:
    env = {
        "OPENAI_API_KEY": "sk-live-test",
        "PIPELINE_ALIVE_TTL_S": "1",
        "PIPELINE_LEASE_TTL_S": "3",
    }
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = model.api_base
    return env


@pytest.fixture(scope="module")
def model() -> Iterator[UIModelServer]:
    server = UIModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def servers(
    django_db_setup: Any, model: UIModelServer, tmp_path_factory: Any
) -> Iterator[tuple[str, str, Any]]:
    """``(base A, base B, B's Popen)``: two Daphne processes with 1 s / 3 s turn TTLs."""
    env = _server_env(model)
    with (
        daphne_serving(env, tmp_path_factory.mktemp("daphne-a")) as base_a,
        daphne_process(env, tmp_path_factory.mktemp("daphne-b")) as (base_b, process_b),
    ):
        yield base_a, base_b, process_b


@pytest.fixture
async def cookie(user: Any) -> str:
    def make() -> str:
        try:
            return session_cookie(user).decode()
        finally:
            connection.close()  # the worker thread's own connection to the test database

    return await asyncio.to_thread(make)


async def _statuses(*message_ids: str) -> dict[str, str]:
    """``{message id: status}`` read from the test database in a worker thread."""

    def read() -> dict[str, str]:
        from chats.models import Message

        try:
            rows = Message.objects.filter(pk__in=message_ids).values_list("id", "status")
            return {str(pk): str(status) for pk, status in rows}
        finally:
            connection.close()

    return await asyncio.to_thread(read)


async def test_a_turn_of_a_killed_process_is_reaped_and_retry_answers_it(
    servers: tuple[str, str, Any], model: UIModelServer, chat: Any, cookie: str
) -> None:
    base_a, base_b, process_b = servers
    model.reset()
    slow = [f"tok{i} " for i in range(400)]  # 20 s of answer: B dies long before its end
    answer = ["Forty", "-two", ", after", " the", " crash."]
    model.queue(Turn(pieces=slow, gap_s=0.05), Turn(pieces=answer))

    async with socket(base_a, cookie) as on_a:
        async with socket(base_b, cookie) as on_b:
            await send_message(on_b, chat, "Count for me, slowly")
            started = await until(on_b, "stream.delta")
            accepted = started[0]
            assert accepted["type"] == "message.accepted"
            message_id, task_id = accepted["message_id"], accepted["task_id"]
            reply_id = accepted["assistant_message_id"]
            assert started[-1]["task_id"] == task_id
            # B is mid-turn and still vouching for it: nothing is failed yet.
            assert not any(f["type"] == "stream.done" for f in started)
            assert "failed" not in (await _statuses(message_id, reply_id)).values()
            process_b.send_signal(signal.SIGKILL)
            assert process_b.wait(timeout=10) == -signal.SIGKILL

        killed_at = time.monotonic()
        deadline = killed_at + REAPED_WITHIN_S
        while (statuses := await _statuses(message_id, reply_id)) != {
            message_id: "failed",
            reply_id: "failed",
        }:
            assert time.monotonic() < deadline, f"not reaped in {REAPED_WITHIN_S} s: {statuses}"
            await asyncio.sleep(0.2)
        reaped_after_s = time.monotonic() - killed_at
        seen = await until(on_a, "stream.done", task_id)
        assert seen[-1]["status"] == "failed"
        assert seen[-1]["message_id"] == reply_id

        retry = {"type": "message.retry", "chat_id": str(chat.pk), "message_id": message_id}
        await on_a.send(json.dumps(retry))
        retried = await until(on_a, "stream.done")
        retry_task = retried[-1]["task_id"]
        await until(on_a, "postprocess.done", retry_task)

    assert reaped_after_s < REAPED_WITHIN_S
    assert retried[0]["type"] == "message.accepted"
    assert retried[0]["message_id"] == message_id
    assert retry_task != task_id
    assert retried[-1]["status"] == "done"
    assert retried[-1]["content"] == "".join(answer)
    assert streamed_text(retried, retry_task) == "".join(answer)
    new_reply = retried[-1]["message_id"]
    assert await _statuses(message_id, reply_id, new_reply) == {
        message_id: "done",
        reply_id: "failed",
        new_reply: "done",
    }
    streamed = [r for r in model.requests if r.get("stream") and "response_format" not in r]
    assert streamed[-1]["messages"][-1]["content"] == "Count for me, slowly"
