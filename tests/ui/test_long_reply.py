"""A reply too long for one frame's content, in the browser against the live app.

The server's ``stream.done`` leaves such a reply's content out (``content_omitted``); the
page answers it from the deltas it holds, encrypts it and stores it with one bulk
``message.store``, so no server copy is left, and it reads back after a reload. A page
that lost deltas resumes (the snapshot comes in parts) or, missing the last one, reads
the server's copy over REST.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from accounts.models import SignupPolicy
from chats.models import Message
from instances.models import Instance
from instances.services import instance_create
from skills.services import skill_catalog_seed, tools_sync
from tests.factories import UserFactory
from tests.ui.pages import new_user, unlock, watch
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LINE = "Once upon a time the story went on, and on, and on.\n\n"
PIECES = [LINE * 6000, *[LINE * 40 for _ in range(50)], "THE END."]


def _stored_reply(username: str) -> Message | None:
    return Message.objects.filter(
        chat__owner__username=username,
        role="assistant",
        encrypted_content__isnull=False,
        server_content__isnull=True,
    ).first()


def eventually(check: Callable[[], Any], timeout_s: float = 30.0, page: Any = None) -> Any:
    """Poll ``check`` until it returns something truthy (the server works concurrently).

    With ``page``, it waits in the page (``wait_for_timeout``) instead of sleeping: a
    socket routed through this process (``route_web_socket``) relays frames only while
    the test thread is inside a Playwright call.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        if page is None:
            time.sleep(0.1)
        else:
            page.wait_for_timeout(100)


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    """An instance with the default skills, taking open sign-ups."""
    tools_sync()
    skill_catalog_seed()
    admin = UserFactory(username="admin")
    created = instance_create(slug="home", name="Home", owner=admin)
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def test_a_400_kb_reply_is_stored_by_the_browser_and_no_server_copy_is_left(
    asgi_server: str, instance: Instance, ui_llm: UIModelServer, ui_context: Any
) -> None:
    assert len("".join(PIECES).encode()) > 400_000
    ui_llm.reset()
    # No title, no summary: no chat metadata changes, so nothing re-reads the chat over
    # REST and only the page's own handling of stream.done can store the reply.
    ui_llm.set_json(title="", summary="")
    ui_llm.queue(Turn(pieces=PIECES, gap_s=0.005))
    page = ui_context.new_page()
    watched = watch(page)
    done_frames: list[dict[str, Any]] = []
    page.on(
        "websocket",
        lambda socket: socket.on(
            "framereceived",
            lambda payload: done_frames.append(payload) if '"stream.done"' in payload else None,
        ),
    )
    new_user(page, asgi_server, "lea")
    page.wait_for_selector("#conn[data-state=open]")

    page.fill("#composer-input", "Tell me a very long story")
    page.press("#composer-input", "Enter")

    page.wait_for_selector(".msg-assistant[data-status=done]", timeout=60_000)
    answer = page.locator(".msg-assistant .msg-body").last
    assert answer.inner_text().strip().endswith("THE END.")
    assert len(done_frames) == 1
    assert '"content_omitted": true' in done_frames[0]
    assert len(done_frames[0]) < 1024

    stored = eventually(lambda: _stored_reply("lea"))
    assert stored is not None
    assert stored.version == 1
    assert len(stored.encrypted_content or "") > 4 * 400_000 // 3
    assert "once upon" not in (stored.encrypted_content or "").lower()
    assert not Message.objects.filter(
        chat__owner__username="lea", server_content__isnull=False
    ).exists()

    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('THE END.')", timeout=30_000)
    text = page.locator(".msg-assistant .msg-body").last.inner_text()
    assert text.count("Once upon a time") == 6000 + 50 * 40
    assert watched.csp_violations() == []


class _LossyLink:
    """Relays the chat socket, losing the 3rd stream.delta and the one before stream.done."""

    def __init__(self) -> None:
        self.deltas = 0
        self.held: str | None = None
        self.received: list[str] = []

    def route(self, page_socket: Any) -> None:
        server = page_socket.connect_to_server()

        def from_server(message: str | bytes) -> None:
            text = message if isinstance(message, str) else message.decode()
            if '"type": "stream.delta"' in text:
                self.deltas += 1
                if self.held is not None:
                    self.forward(page_socket, self.held)
                self.held = None if self.deltas == 3 else text
                return
            if '"type": "stream.done"' in text:
                self.held = None  # the reply's last delta never arrives
            self.forward(page_socket, text)

        server.on_message(from_server)

    def forward(self, page_socket: Any, text: str) -> None:
        self.received.append(text)
        page_socket.send(text)


def test_a_page_that_lost_deltas_resumes_in_parts_and_stores_the_reply_from_the_server_copy(
    asgi_server: str, instance: Instance, ui_llm: UIModelServer, ui_context: Any
) -> None:
    ui_llm.reset()
    ui_llm.set_json(title="", summary="")
    ui_llm.queue(Turn(pieces=PIECES, gap_s=0.005))
    page = ui_context.new_page()
    link = _LossyLink()
    page.route_web_socket("**/ws/chat/", link.route)
    new_user(page, asgi_server, "max")
    page.wait_for_selector("#conn[data-state=open]")

    page.fill("#composer-input", "Tell me a very long story")
    page.press("#composer-input", "Enter")

    page.wait_for_selector(".msg-assistant .msg-body:has-text('THE END.')", timeout=60_000)
    parts = [t for t in link.received if '"type": "stream.snapshot"' in t]
    assert len(parts) > 1
    assert all('"parts": ' in t for t in parts)
    stored = eventually(lambda: _stored_reply("max"), page=page)
    assert stored is not None
    assert stored.version == 1
    assert len(stored.encrypted_content or "") > 4 * 400_000 // 3
    text = page.locator(".msg-assistant .msg-body").last.inner_text()
    assert text.count("Once upon a time") == 6000 + 50 * 40
