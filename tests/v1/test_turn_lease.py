"""/v1 turns in the turn registry (docs/api.md §6): two requests on one conversation run
one after the other, and a turn of a process that died is ended by the reaper.

Two real Daphne processes on the test session's PostgreSQL, Redis and OpenBao with short
turn TTLs (alive key 1 s, lease 3 s), their models played by one loopback server. A
serves the queueing test and runs the reaper; B is SIGKILLed mid-stream.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from accounts.instance_keys import instance_key_create
from chats.models import Message
from instances.models import Instance
from instances.services import instance_create
from tests.ui.conftest import daphne_process, daphne_serving
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CONVERSATION = "OpenMates-Conversation-Id"
REAPED_WITHIN_S = 20.0  # B's alive key (1 s) plus at most one reaper period (10 s) of A


@pytest.fixture(scope="module")
def servers(
    django_db_setup: Any, v1_llm: UIModelServer, tmp_path_factory: Any
) -> Iterator[tuple[str, str, Any]]:
    """``(base A, base B, B's Popen)``."""
    env = {
        "OPENAI_API_KEY": "sk-v1-test",
        "V1_REQUESTS_PER_MINUTE": "1000",
        "PIPELINE_ALIVE_TTL_S": "1",
        "PIPELINE_LEASE_TTL_S": "3",
    }
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = v1_llm.api_base
    with (
        daphne_serving(env, tmp_path_factory.mktemp("daphne-a")) as base_a,
        daphne_process(env, tmp_path_factory.mktemp("daphne-b")) as (base_b, process_b),
    ):
        yield base_a, base_b, process_b


@pytest.fixture
def key(owner: Any, skill_catalog: None) -> str:
    instance: Instance = instance_create(slug="live", name="Live", owner=owner)
    return instance_key_create(instance=instance, name="script")[1]


def _post(base: str, key: str, text: str, chat_id: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", **({CONVERSATION: chat_id} if chat_id else {})}
    body = {"model": "live", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=60)


def _answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def _main_calls(model: UIModelServer) -> list[dict[str, Any]]:
    return [r for r in model.requests if r.get("stream")]


def test_a_second_request_on_a_conversation_waits_for_the_running_one(
    servers: tuple[str, str, Any], model_server: UIModelServer, key: str
) -> None:
    base_a = servers[0]
    slow = [f"part{i} " for i in range(12)]
    model_server.queue(
        Turn(pieces=["Ready."], gap_s=0), Turn(pieces=slow, gap_s=0.1), Turn(pieces=["Second."])
    )
    chat_id = _post(base_a, key, "Start a conversation").headers[CONVERSATION]
    first: dict[str, str] = {}

    def stream_first() -> None:
        first["text"] = _answer(_post(base_a, key, "Count slowly", chat_id))

    runner = threading.Thread(target=stream_first)
    runner.start()
    deadline = time.monotonic() + 20
    while len(_main_calls(model_server)) < 2:  # the slow answer is being streamed
        assert time.monotonic() < deadline, "the first turn never reached the model"
        time.sleep(0.02)
    second = _answer(_post(base_a, key, "And now?", chat_id))
    runner.join(timeout=30)

    assert first["text"] == "".join(slow)
    assert second == "Second."
    # The second turn ran after the first ended: its history holds the whole slow answer.
    contents = [str(m["content"]) for m in _main_calls(model_server)[2]["messages"]]
    assert any("".join(slow).strip() in c for c in contents)
    rows = Message.objects.filter(chat_id=chat_id).order_by("created_at", "pk")
    assert [(m.role, m.status) for m in rows] == [("user", "done"), ("assistant", "done")] * 3


def test_a_turn_of_a_killed_process_ends_failed(
    servers: tuple[str, str, Any], model_server: UIModelServer, key: str
) -> None:
    base_a, base_b, process_b = servers
    model_server.queue(Turn(pieces=["Awake."], gap_s=0), Turn(pieces=["tok "] * 400, gap_s=0.05))
    # A has served a /v1 turn, so its registry's heartbeat (and reaper) runs.
    assert _answer(_post(base_a, key, "Wake up")) == "Awake."
    body = {"model": "live", "stream": True, "messages": [{"role": "user", "content": "Go"}]}
    with httpx.stream(
        "POST",
        f"{base_b}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        chat_id = response.headers[CONVERSATION]
        for line in response.iter_lines():
            if "tok" in line:
                break
        process_b.send_signal(signal.SIGKILL)
        assert process_b.wait(timeout=10) == -signal.SIGKILL
    killed_at = time.monotonic()

    def statuses() -> list[tuple[str, str]]:
        # In the order of the turn (created_at): the reaper writes both statuses, so the
        # messages' last-change versions (chat_version) may come in either order.
        rows = Message.objects.filter(chat_id=chat_id).order_by("created_at", "pk")
        return [(m.role, m.status) for m in rows]

    assert ("assistant", "pending") in statuses()
    while statuses() != [("user", "failed"), ("assistant", "failed")]:
        assert time.monotonic() - killed_at < REAPED_WITHIN_S, f"not reaped: {statuses()}"
        time.sleep(0.2)
