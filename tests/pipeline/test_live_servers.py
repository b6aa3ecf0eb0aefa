"""/ws/chat/ over real sockets against live Daphne processes (not WebsocketCommunicator).

Two Daphne subprocesses serve the app on free loopback ports, sharing the test session's
PostgreSQL (the test database), Redis (channel layer, cache, turn state) and OpenBao; the
model is a loopback OpenAI-compatible server (``tests.ui.wire``). Clients are the
``websockets`` package with an Origin header and a real session cookie.

What these pin down: in one process, a turn started on one socket streams to the user's
other socket even after some socket of the process has closed (channels-redis's shared
receive lock must never be held by a coroutine popping another list than the sockets');
across processes, a turn sent through process A streams to the user's socket on process
B, and ``task.cancel`` sent through B stops the turn running in A. At the WebSocket layer
(Daphne, ``openmates.daphne_ws``): a text frame that is not UTF-8 is answered with close
code 1007, and a flood of frames ended by a close logs no traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from pipeline.ids import new_id
from tests.pipeline.conftest import session_cookie
from tests.ui.conftest import daphne_serving
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

FRAME_WAIT_S = 15.0


@pytest.fixture(scope="module")
def model() -> Iterator[UIModelServer]:
    """The loopback model server both Daphne processes call."""
    server = UIModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def log_dirs(tmp_path_factory: Any) -> tuple[Path, Path]:
    """Where processes A and B write their output (``daphne.log``)."""
    return tmp_path_factory.mktemp("daphne-a"), tmp_path_factory.mktemp("daphne-b")


@pytest.fixture(scope="module")
def servers(
    django_db_setup: Any, model: UIModelServer, log_dirs: tuple[Path, Path]
) -> Iterator[tuple[str, str]]:
    """Base URLs of two Daphne processes ("A" and "B") on the same test services."""
    env = {"OPENAI_API_KEY": "sk-live-test"}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = model.api_base
    with ExitStack() as stack:
        first = stack.enter_context(daphne_serving(env, log_dirs[0]))
        second = stack.enter_context(daphne_serving(env, log_dirs[1]))
        yield first, second


@pytest.fixture
def llm(model: UIModelServer) -> UIModelServer:
    model.reset()
    return model


@pytest.fixture
async def cookie(user: Any) -> str:
    def make() -> str:
        try:
            return session_cookie(user).decode()
        finally:
            connection.close()  # the worker thread's own connection to the test database

    return await asyncio.to_thread(make)


@asynccontextmanager
async def socket(base: str, cookie: str) -> AsyncIterator[ClientConnection]:
    """A signed-in /ws/chat/ socket on ``base``, past its ``task.active`` frame."""
    uri = base.replace("http://", "ws://") + "/ws/chat/"
    headers = {"Origin": base, "Cookie": cookie}
    async with connect(uri, additional_headers=headers, open_timeout=FRAME_WAIT_S) as ws:
        first = await _recv(ws)
        assert first["type"] == "task.active"
        yield ws


async def _recv(ws: ClientConnection) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), FRAME_WAIT_S))
    return frame


async def until(ws: ClientConnection, kind: str, task_id: str = "") -> list[dict[str, Any]]:
    """Frames up to and including the first of type ``kind`` (of ``task_id`` if given)."""
    got: list[dict[str, Any]] = []
    while True:
        try:
            frame = await _recv(ws)
        except TimeoutError:
            raise AssertionError(f"no {kind!r} within {FRAME_WAIT_S} s; got {got}") from None
        got.append(frame)
        if frame["type"] == kind and (not task_id or frame.get("task_id") == task_id):
            return got


def streamed_text(frames: list[dict[str, Any]], task_id: str) -> str:
    """The reply text a client rebuilds from a turn's snapshots and deltas."""
    text, sequence = "", 0
    for frame in frames:
        if frame.get("task_id") != task_id:
            continue
        if frame["type"] == "stream.snapshot":
            text, sequence = frame["content"], frame["sequence"]
        elif frame["type"] == "stream.delta" and frame["sequence"] == sequence + 1:
            text, sequence = text + frame["delta"], frame["sequence"]
    return text


async def send_message(ws: ClientConnection, chat: Any, content: str) -> None:
    frame = {"type": "message.send", "chat_id": str(chat.pk), "message_id": new_id()}
    await ws.send(json.dumps({**frame, "content": content}))


async def test_a_turn_streams_to_the_users_other_socket_after_one_socket_closed(
    servers: tuple[str, str], llm: UIModelServer, chat: Any, cookie: str
) -> None:
    pieces = [f"tok{i} " for i in range(12)]
    llm.queue(Turn(pieces=pieces, gap_s=0.02))
    base = servers[0]
    async with socket(base, cookie):
        pass  # a socket of this process came and went
    async with socket(base, cookie) as first, socket(base, cookie) as second:
        await send_message(first, chat, "Count for me")
        sent = await until(first, "stream.done")
        task_id = sent[-1]["task_id"]
        seen = await until(second, "stream.done", task_id)
    assert sent[-1]["status"] == "done"
    assert sent[-1]["content"] == "".join(pieces)
    assert seen[-1]["content"] == "".join(pieces)
    assert streamed_text(seen, task_id) == "".join(pieces)
    assert any(f["type"] in ("stream.delta", "stream.snapshot") for f in seen)


async def test_a_turn_sent_through_one_process_streams_to_the_other_and_cancels_from_it(
    servers: tuple[str, str], llm: UIModelServer, chat: Any, cookie: str
) -> None:
    long = [f"tok{i} " for i in range(200)]
    llm.queue(Turn(pieces=["Across ", "processes."]), Turn(pieces=long, gap_s=0.05))
    base_a, base_b = servers
    async with socket(base_a, cookie) as on_a, socket(base_b, cookie) as on_b:
        await send_message(on_a, chat, "Hello from A")
        sent = await until(on_a, "postprocess.done")
        first_task = sent[0]["task_id"]
        seen = await until(on_b, "stream.done", first_task)
        assert seen[-1]["status"] == "done"
        # A two-piece answer may be over before B's process subscribes to it: B then gets
        # the whole reply in stream.done, and whatever deltas it saw are its start.
        assert seen[-1]["content"] == "Across processes."
        assert "Across processes.".startswith(streamed_text(seen, first_task))

        await send_message(on_a, chat, "Now count, slowly")
        started = await until(on_a, "stream.delta")
        task_id = started[-1]["task_id"]
        assert task_id != first_task
        await until(on_b, "stream.delta", task_id)
        await on_b.send(json.dumps({"type": "task.cancel", "task_id": task_id}))
        ended = await until(on_a, "task.cancelled", task_id)
        seen_ended = await until(on_b, "task.cancelled", task_id)
    done = next(f for f in ended if f["type"] == "stream.done")
    assert done["status"] == "cancelled"
    assert done["content"].startswith("tok0 ")
    assert "tok199" not in done["content"]
    assert any(f["type"] == "stream.done" and f["status"] == "cancelled" for f in seen_ended)


async def test_large_frames_reach_the_consumer_and_get_protocol_errors(servers, cookie):
    first, _ = servers
    async with socket(first, cookie) as ws:
        # 2 MiB: within the 4 MiB of docs/protocol.md §1, above Daphne's 1 MiB default.
        messages = [{"message_id": new_id(), "role": "user", "content": "x" * 60_000}] * 35
        history: dict[str, Any] = {
            "type": "chat.history",
            "chat_id": new_id(),
            "request_id": "r-1",
            "messages": messages,
        }
        await ws.send(json.dumps(history))
        answer = await _recv(ws)
        assert answer["type"] == "error"
        assert answer["code"] != "frame_too_large"
        # 5 MiB: past the protocol's limit, answered as such rather than dropped.
        await ws.send(json.dumps({**history, "messages": messages * 3}))
        answer = await _recv(ws)
        assert (answer["type"], answer["code"]) == ("error", "frame_too_large")
        await ws.send(json.dumps({"type": "ping", "ts": 7}))
        assert await _recv(ws) == {"type": "pong", "ts": 7}


async def test_a_frame_over_8_mib_is_closed_with_1009_and_a_new_socket_works(servers, cookie):
    async with socket(servers[0], cookie) as ws:
        await ws.send(json.dumps({"type": "ping", "ts": 1, "pad": "x" * (8 * 1024 * 1024)}))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), FRAME_WAIT_S)
    # Daphne refuses to read it: RFC 6455's "message too big" (docs/protocol.md §9).
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    async with socket(servers[0], cookie) as ws:
        await ws.send(json.dumps({"type": "ping", "ts": 2}))
        assert await _recv(ws) == {"type": "pong", "ts": 2}


async def test_a_text_frame_that_is_not_utf8_is_closed_with_1007(servers, cookie):
    async with socket(servers[0], cookie) as ws:
        await ws.send(b'{"type": "ping", "ts": "\xff\xfe"}', text=True)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), FRAME_WAIT_S)
    # A close frame came (not a reset), with RFC 6455's code for inconsistent data.
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1007


async def test_a_flood_of_frames_then_a_close_logs_no_traceback(servers, cookie, log_dirs):
    # The consumer is still answering the flood when the close arrives; whether one of
    # its sends lands between the closing handshake and the disconnect is a race, which
    # tests/openmates/test_daphne_ws.py pins down without a network.
    log = log_dirs[0] / "daphne.log"
    logged_before = log.stat().st_size
    async with socket(servers[0], cookie) as ws:
        for n in range(10_000):
            await ws.send(json.dumps({"type": "ping", "ts": n}))
    # The server works through the backlog after the close; let it finish (or give up).
    await asyncio.sleep(12)
    async with socket(servers[0], cookie):
        pass  # the process still serves (task.active came)
    with log.open("rb") as output:
        output.seek(logged_before)
        logged = output.read().decode(errors="replace")
    assert "Traceback" not in logged
    assert "ERROR" not in logged
    assert "Attempt to send on a closed protocol" not in logged
