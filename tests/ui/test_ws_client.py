"""static/js/app/ws.js in Chromium against a scripted WebSocket server on loopback.

The server plays its side of a turn (docs/protocol.md §5) with a gap in the delta sequence and a
dropped connection; the client must ask for ``stream.resume`` from its last good
sequence, reconnect on its own, resume the running turn announced by ``task.active``, and
deliver every delta once, in order. The page is served from the live app's origin but
without its CSP (Playwright answers that one URL) so it may reach the test server's port.
``historyWithinLimit`` is checked there too: the files' data a ``chat.history`` keeps.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHAT = "01a22a00-0000-7000-8000-000000000001"
TASK = "01a22a00-0000-7000-8000-000000000002"
REPLY = "01a22a00-0000-7000-8000-000000000003"
USER_MESSAGE = "01a22a00-0000-7000-8000-000000000004"


def _delta(sequence: int, text: str) -> str:
    return json.dumps(
        {
            "type": "stream.delta",
            "chat_id": CHAT,
            "task_id": TASK,
            "message_id": REPLY,
            "sequence": sequence,
            "delta": text,
        }
    )


def _snapshot(sequence: int, content: str) -> str:
    return json.dumps(
        {
            "type": "stream.snapshot",
            "chat_id": CHAT,
            "task_id": TASK,
            "message_id": REPLY,
            "sequence": sequence,
            "content": content,
        }
    )


class ScriptedServer:
    """Connection 1: deltas 1, 2, 4 (a gap), then 5, then a drop. Connection 2: resume."""

    def __init__(self) -> None:
        self.received: list[tuple[int, dict[str, Any]]] = []
        self.connections = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Future[None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _resume_frame(self, socket: ServerConnection, number: int) -> dict[str, Any]:
        async for message in socket:
            frame = json.loads(message)
            self.received.append((number, frame))
            if frame["type"] == "stream.resume":
                return dict(frame)
        raise AssertionError("the client never asked to resume")

    async def _handler(self, socket: ServerConnection) -> None:
        self.connections += 1
        number = self.connections
        if number == 1:
            await socket.send(json.dumps({"type": "task.active", "tasks": []}))
            await socket.send(
                json.dumps(
                    {
                        "type": "message.accepted",
                        "chat_id": CHAT,
                        "message_id": USER_MESSAGE,
                        "task_id": TASK,
                        "assistant_message_id": REPLY,
                    }
                )
            )
            for sequence, text in ((1, "a"), (2, "b"), (4, "d")):
                await socket.send(_delta(sequence, text))
            await self._resume_frame(socket, number)
            await socket.send(_snapshot(4, "abcd"))
            await socket.send(_delta(5, "e"))
            await asyncio.sleep(0.2)
            await socket.close(code=1011, reason="server going away")
            return
        await socket.send(
            json.dumps(
                {
                    "type": "task.active",
                    "tasks": [
                        {
                            "chat_id": CHAT,
                            "task_id": TASK,
                            "message_id": USER_MESSAGE,
                            "assistant_message_id": REPLY,
                            "last_sequence": 6,
                        }
                    ],
                }
            )
        )
        await self._resume_frame(socket, number)
        await socket.send(_snapshot(6, "abcdef"))
        await socket.send(
            json.dumps(
                {
                    "type": "stream.done",
                    "chat_id": CHAT,
                    "task_id": TASK,
                    "message_id": REPLY,
                    "content": "abcdef",
                    "model": "m",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 6},
                    "status": "done",
                }
            )
        )
        async for message in socket:
            self.received.append((number, json.loads(message)))

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = self._loop.create_future()
        async with serve(self._handler, "127.0.0.1", 0) as server:
            self.port = int(next(iter(server.sockets)).getsockname()[1])
            self._ready.set()
            await self._stop

    def start(self) -> ScriptedServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        def finish() -> None:
            if self._stop is not None and not self._stop.done():
                self._stop.set_result(None)

        self._loop.call_soon_threadsafe(finish)
        self._thread.join(10)


@pytest.fixture(scope="module")
def ui_browser() -> Iterator[Any]:
    """Chromium that lets a page Playwright answered reach a loopback port.

    Playwright's answer has no address, so Chromium counts the page as public and its
    local-network checks would block the connection to the test server.
    """
    from playwright.sync_api import sync_playwright

    from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=[*CHROMIUM_ARGS, "--disable-features=LocalNetworkAccessChecks"],
    )
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def scripted_ws() -> Iterator[ScriptedServer]:
    server = ScriptedServer().start()
    yield server
    server.stop()


RUN = """async (url) => {
  const { ChatSocket } = await import('/static/js/app/ws.js');
  const log = [];
  const socket = new ChatSocket(url);
  socket.addEventListener('state', (e) => log.push(['state', e.detail]));
  socket.addEventListener('stream.delta',
    (e) => log.push(['delta', e.detail.sequence, e.detail.delta]));
  socket.addEventListener('stream.snapshot',
    (e) => log.push(['snapshot', e.detail.sequence, e.detail.content]));
  const done = new Promise((resolve) => socket.addEventListener('stream.done', (e) => {
    log.push(['done', e.detail.content]);
    resolve();
  }));
  socket.connect();
  await Promise.race([done, new Promise((resolve) => setTimeout(resolve, 15000))]);
  socket.close();
  return log;
}"""


def test_gap_and_drop_are_resumed_and_every_delta_arrives_once(
    asgi_server: str, scripted_ws: ScriptedServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    page.route(
        f"{asgi_server}/ws-client-test",
        lambda route: route.fulfill(
            content_type="text/html", body="<!doctype html><title>t</title>"
        ),
    )
    page.goto(f"{asgi_server}/ws-client-test")

    log = page.evaluate(RUN, f"ws://127.0.0.1:{scripted_ws.port}/")

    events = [entry for entry in log if entry[0] != "state"]
    assert events == [
        ["delta", 1, "a"],
        ["delta", 2, "b"],
        ["snapshot", 4, "abcd"],
        ["delta", 5, "e"],
        ["snapshot", 6, "abcdef"],
        ["done", "abcdef"],
    ]
    states = [entry[1] for entry in log if entry[0] == "state"]
    assert states[:2] == ["connecting", "open"]
    assert "reconnecting" in states
    assert states[-1] in {"open", "closed"}
    resumes = [(n, f) for n, f in scripted_ws.received if f["type"] == "stream.resume"]
    assert resumes == [
        (1, {"type": "stream.resume", "chat_id": CHAT, "task_id": TASK, "last_sequence": 2}),
        (2, {"type": "stream.resume", "chat_id": CHAT, "task_id": TASK, "last_sequence": 5}),
    ]


FIT = """async () => {
  const { historyWithinLimit } = await import('/static/js/app/ws.js');
  const file = (name, chars) => (
    { embed_id: name, name, mime: 'text/plain', data: 'QUFB'.repeat(chars / 4) });
  const summary = (messages) => messages.map((m) => [
    m.message_id, m.content.length, (m.files || []).map((f) => [f.name, 'data' in f]),
  ]);
  const MB = 1000 * 1000;
  const files = summary(historyWithinLimit([
    { message_id: 'old', role: 'user', content: 'old',
      files: [file('a.txt', 1.5 * MB), file('d.txt', 1000)] },
    { message_id: 'reply', role: 'assistant', content: 'x' },
    { message_id: 'mid', role: 'user', content: 'mid', files: [file('b.txt', 1.5 * MB)] },
    { message_id: 'new', role: 'user', content: 'new', files: [file('c.txt', 1.5 * MB)] },
  ]));
  const history = (chars) => summary(historyWithinLimit([
    { message_id: 'q', role: 'user', content: 'q', files: [file('e.txt', MB)] },
    { message_id: 'long', role: 'assistant', content: 'y'.repeat(chars) },
  ]));
  return { files, fits: history(3.5 * MB), shortened: history(4.5 * MB) };
}"""


def test_a_history_keeps_the_data_of_the_newest_files_that_fit_its_frame(
    asgi_server: str, ui_context: Any
) -> None:
    page = ui_context.new_page()
    page.route(
        f"{asgi_server}/ws-client-test",
        lambda route: route.fulfill(
            content_type="text/html", body="<!doctype html><title>t</title>"
        ),
    )
    page.goto(f"{asgi_server}/ws-client-test")

    fitted = page.evaluate(FIT)

    # 4 MiB less a reserve: the two newest 1.5 MB files fit, the oldest does not, a small
    # older one still does; every message stays.
    assert fitted["files"] == [
        ["old", 3, [["a.txt", False], ["d.txt", True]]],
        ["reply", 1, []],
        ["mid", 3, [["b.txt", True]]],
        ["new", 3, [["c.txt", True]]],
    ]
    # The texts come first: files take the room they leave, and a text is shortened only
    # when the texts alone do not fit.
    assert fitted["fits"] == [["q", 1, [["e.txt", False]]], ["long", 3_500_000, []]]
    assert fitted["shortened"] == [["q", 1, [["e.txt", True]]], ["long", 2001, []]]
