"""Two pages of one user, and another device of the user, stay in sync: the chat list
(create, rename, pin, delete), the question typed in the other page with its answer, a
retry, through the user's socket group (docs/protocol.md §4), and a page whose socket was
down drops the chats deleted meanwhile when it reconnects (``sync.done``'s ``deleted``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from accounts.models import SignupPolicy
from accounts.services import api_token_create
from chats import services as chat_services
from chats.models import Chat, Message
from instances.models import Instance
from pipeline.ids import new_id
from tests.ui.pages import indexeddb_rows, new_user, other_device, unlock
from tests.ui.test_chat import eventually, send
from tests.ui.test_outbox import SOCKET_SWITCH
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SYNC_MS = 2_000
# How long a following page leaves the asking page's work to it (read from the app).
FOLLOWER_WAIT_MS = int(
    re.search(
        r"export const FOLLOWER_WAIT_MS = (\d+);",
        (Path(__file__).parents[2] / "static/js/app/state.js").read_text(),
    ).group(1)  # type: ignore[union-attr]
)


@pytest.fixture
def llm(ui_llm: UIModelServer) -> UIModelServer:
    ui_llm.reset()
    return ui_llm


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    created = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def _titles(page: Any) -> list[str]:
    return [t.strip() for t in page.locator(".chat-item-open").all_inner_texts()]


def _menu(page: Any, title: str, action: str) -> None:
    row = page.locator(".chat-item", has=page.locator(".chat-item-open", has_text=title))
    row.hover()
    row.get_by_role("button", name=f"{action} {title}").click()


def _two_pages(context: Any, base: str, username: str) -> tuple[Any, Any]:
    first = context.new_page()
    new_user(first, base, username)
    first.wait_for_selector("#conn[data-state=open]")
    second = context.new_page()
    second.goto(f"{base}/")
    unlock(second)
    second.wait_for_selector("#conn[data-state=open]")
    return first, second


def test_create_rename_pin_and_delete_show_in_the_other_page_within_2_s(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    first, second = _two_pages(ui_context, asgi_server, "syncer")
    assert _titles(second) == []

    llm.set_json(title="Garden plans")
    llm.queue(Turn(pieces=["Plant ", "tomatoes."]))
    send(first, "What to plant?")
    first.wait_for_selector(".chat-item-open:has-text('Garden plans')")
    second.wait_for_selector(".chat-item-open:has-text('Garden plans')", timeout=SYNC_MS)

    _menu(first, "Garden plans", "Rename")
    first.fill(".chat-rename", "Vegetables")
    first.press(".chat-rename", "Enter")
    second.wait_for_selector(".chat-item-open:has-text('Vegetables')", timeout=SYNC_MS)
    assert _titles(second) == ["Vegetables"]

    _menu(second, "Vegetables", "Pin")
    first.wait_for_selector(
        ".chat-item:has(.chat-item-pin) .chat-item-open:has-text('Vegetables')", timeout=SYNC_MS
    )

    second.click(".chat-item-open:has-text('Vegetables')")
    second.wait_for_selector("#chat-title:has-text('Vegetables')")
    _menu(first, "Vegetables", "Delete")
    first.click("#confirm-yes")
    second.wait_for_selector(
        ".chat-item-open:has-text('Vegetables')", state="detached", timeout=SYNC_MS
    )
    assert _titles(second) == []
    # The page that had it open says why it now shows a new chat; the deleting page not.
    assert second.inner_text("#chat-title") == "New chat"
    assert "deleted in another tab" in second.inner_text("#composer-status")
    assert "deleted in another tab" not in first.inner_text("#composer-status")


def test_the_other_page_shows_the_question_with_the_streamed_answer(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(
        Turn(pieces=["First ", "answer."]),
        Turn(pieces=[f"tok{i} " for i in range(60)], gap_s=0.05),
    )
    first, second = _two_pages(ui_context, asgi_server, "questioner")
    send(first, "Hello there")
    first.wait_for_selector(".msg-assistant .msg-body:has-text('First answer.')")
    second.wait_for_selector(".chat-item .chat-item-open", timeout=SYNC_MS)
    second.click(".chat-item .chat-item-open")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('First answer.')")

    send(first, "Count for me")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('tok3')", timeout=10_000)
    second.wait_for_selector(".msg-user .msg-body:has-text('Count for me')", timeout=SYNC_MS)
    first.click("#stop")
    first.wait_for_selector(".msg-assistant .msg-status-cancelled")
    second.wait_for_selector(".msg-assistant .msg-status-cancelled")
    roles = second.locator(".msg").evaluate_all("nodes => nodes.map((n) => n.dataset.role)")
    assert roles == ["user", "assistant", "user", "assistant"]
    texts = second.locator(".msg-user .msg-body").all_inner_texts()
    assert texts == ["Hello there", "Count for me"]


def _sent(page: Any, frame_type: str) -> list[dict[str, Any]]:
    """The frames of ``frame_type`` the page sends from now on (any of its sockets)."""
    frames: list[dict[str, Any]] = []

    def keep(payload: str) -> None:
        if f'"{frame_type}"' in payload:
            frames.append(json.loads(payload))

    page.on("websocket", lambda socket: socket.on("framesent", keep))
    return frames


def _recorded_pages(context: Any, base: str, username: str) -> tuple[Any, Any, dict[str, Any]]:
    """Two pages of a new user, each recording its message.store and chat.update frames."""
    first, second = context.new_page(), context.new_page()
    sent = {
        "first_stores": _sent(first, "message.store"),
        "first_updates": _sent(first, "chat.update"),
        "second_stores": _sent(second, "message.store"),
        "second_updates": _sent(second, "chat.update"),
    }
    new_user(first, base, username)
    first.wait_for_selector("#conn[data-state=open]")
    second.goto(f"{base}/")
    unlock(second)
    second.wait_for_selector("#conn[data-state=open]")
    return first, second, sent


def test_the_page_that_asked_stores_the_reply_and_title_the_other_only_follows(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(title="Kept once")
    llm.queue(Turn(pieces=["First ", "answer."]), Turn(pieces=["Second ", "answer."]))
    first, second, sent = _recorded_pages(ui_context, asgi_server, "asker")
    send(first, "Hello there")
    first.wait_for_selector(".msg-assistant[data-status=done]")
    second.wait_for_selector(".chat-item-open:has-text('Kept once')", timeout=5_000)
    second.click(".chat-item .chat-item-open")
    send(first, "And again")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('Second answer.')")
    # Longer than a follower waits before doing the asking page's work itself.
    second.wait_for_timeout(FOLLOWER_WAIT_MS + 1_500)

    replies = list(
        Message.objects.filter(role="assistant", chat__owner__username="asker").order_by(
            "created_at"
        )
    )
    assert [m.encrypted_content is not None for m in replies] == [True, True]
    stored_by_first = [f["message_id"] for f in sent["first_stores"]]
    assert {m.pk for m in replies} <= set(stored_by_first)
    assert sent["second_stores"] == []
    assert sent["second_updates"] == []
    assert second.locator(".msg-assistant").count() == 2


def test_a_following_page_stores_the_reply_when_the_page_that_asked_is_gone(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(
        Turn(pieces=["First ", "answer."]),
        Turn(pieces=[f"tok{i} " for i in range(100)], gap_s=0.05),
    )
    first, second, sent = _recorded_pages(ui_context, asgi_server, "leaver")
    send(first, "Hello there")
    first.wait_for_selector(".msg-assistant[data-status=done]")
    second.wait_for_selector(".chat-item .chat-item-open", timeout=5_000)
    second.click(".chat-item .chat-item-open")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('First answer.')")
    send(first, "Count for me")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('tok3')", timeout=10_000)
    first.close()
    ended = ".msg-assistant:is([data-status=done], [data-status=failed], [data-status=cancelled])"
    second.wait_for_selector(f"{ended} >> nth=1", timeout=30_000)
    assert second.locator(".msg-assistant").nth(1).get_attribute("data-status") == "done"

    last = Message.objects.filter(role="assistant", chat__owner__username="leaver").latest(
        "created_at"
    )
    assert eventually(lambda: Message.objects.get(pk=last.pk).encrypted_content is not None)
    second.wait_for_timeout(300)  # Playwright hands over the page's events inside its calls
    assert [f["message_id"] for f in sent["second_stores"]] == [last.pk]


def test_a_server_read_from_before_the_answer_ended_does_not_reopen_it(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    # While the answer streams, another tab pins the chat, so this page reads the chat's
    # messages over REST; that read ("pending") arrives only after stream.done, and every
    # later read gets the same stale answer.
    llm.queue(Turn(pieces=[f"Piece {n}. " for n in range(40)], gap_s=0.1))
    page = ui_context.new_page()
    new_user(page, asgi_server, "stale")
    page.wait_for_selector("#conn[data-state=open]")
    other = ui_context.new_page()
    other.goto(asgi_server + "/")
    unlock(other)
    other.wait_for_selector("#conn[data-state=open]")
    cookies = {c["name"]: c["value"] for c in ui_context.cookies()}
    held: list[Any] = []
    stale: list[str] = []

    def hold(route: Any) -> None:
        if stale:
            route.fulfill(status=200, content_type="application/json", body=stale[0])
            return
        # The server's answer now, read beside the browser (not a Playwright call, which a
        # route handler must not wait for); the page gets it later.
        stale.append(httpx.get(route.request.url, cookies=cookies).text)
        held.append(route)

    page.route("**/api/chats/*/messages/*", hold)
    send(page, "Tell me in pieces")
    page.wait_for_selector(".msg-assistant[data-status=streaming] .msg-body:has-text('Piece 1.')")
    row = other.locator(".chat-item")
    row.hover()
    row.locator(".chat-item-menu button[aria-label^='Pin']").click()
    for _ in range(200):  # route handlers run while Playwright is called
        if held:
            break
        page.wait_for_timeout(50)
    answer = json.loads(stale[0])["messages"][-1]
    assert answer["role"] == "assistant"
    assert answer["status"] in ("pending", "streaming")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Piece 39.')")
    held[0].fulfill(status=200, content_type="application/json", body=stale[0])

    page.wait_for_selector(".chat-item:has(.chat-item-pin)")
    page.wait_for_timeout(1000)
    assert page.locator(".msg-assistant").get_attribute("data-status") == "done"
    assert "Piece 39." in page.inner_text(".msg-assistant .msg-body")
    rows = json.loads(indexeddb_rows(page, "messages"))
    assert [row["status"] for row in rows if row["role"] == "assistant"] == ["done"]
    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Piece 39.')")
    assert page.locator(".msg-assistant").get_attribute("data-status") == "done"


def test_a_turn_a_program_starts_with_an_api_token_shows_in_the_open_page_with_its_question(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    # A script on the user's API token sends into the chat open in the page and stores
    # nothing itself: the page follows the turn and shows the question once it ended.
    llm.queue(Turn(pieces=["First."]), Turn(pieces=[f"w{i} " for i in range(30)], gap_s=0.05))
    page = ui_context.new_page()
    new_user(page, asgi_server, "scripted")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "From the browser")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    chat = Chat.objects.get(owner__username="scripted")
    _, raw = api_token_create(user=chat.owner, name="script")
    headers = {"Origin": asgi_server, "Authorization": f"Bearer {raw}"}
    with connect(
        asgi_server.replace("http://", "ws://") + "/ws/chat/", additional_headers=headers
    ) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "task.active"
        ws.send(
            json.dumps(
                {
                    "type": "message.send",
                    "chat_id": chat.pk,
                    "message_id": new_id(),
                    "content": "From the script",
                }
            )
        )
        page.wait_for_selector(".msg-assistant .msg-body:has-text('w3')", timeout=10_000)
        page.wait_for_selector(".msg-user .msg-body:has-text('From the script')", timeout=15_000)
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('w29')")
    bodies = page.locator(".msg .msg-body").all_inner_texts()
    assert [b.split()[0] for b in bodies] == ["From", "First.", "From", "w0"]
    assert bodies[2].strip() == "From the script"
    # The page stored its own ciphertext of the script's question: no server copy is left.
    assert eventually(
        lambda: not Message.objects.filter(chat=chat, server_content__isnull=False).exists()
    )


def test_a_chat_deleted_while_the_socket_was_down_goes_when_it_reconnects(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    page.add_init_script(SOCKET_SWITCH)
    new_user(page, asgi_server, "returner")
    page.wait_for_selector("#conn[data-state=open]")
    llm.set_json(title="Old plans")
    llm.queue(Turn(pieces=["Kept ", "here."]))
    send(page, "Keep this?")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    page.wait_for_selector(".chat-item-open:has-text('Old plans')")

    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn:not([data-state=open])")
    # Deleted elsewhere while this page cannot hear of it (no socket of the user is open).
    chat_services.chat_delete(chat=Chat.objects.get(owner__username="returner"))
    page.wait_for_timeout(500)
    assert _titles(page) == ["Old plans"]
    page.evaluate("window.__wsDown = false")

    page.wait_for_selector(".chat-item-open", state="detached", timeout=30_000)
    assert "deleted in another tab" in page.inner_text("#composer-status")
    assert indexeddb_rows(page, "chats") == "[]"
    page.reload()
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    page.wait_for_timeout(500)
    assert _titles(page) == []


def test_another_device_sees_chats_change_and_a_question_with_its_streamed_answer(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any, ui_browser: Any
) -> None:
    first = ui_context.new_page()
    new_user(first, asgi_server, "traveller")
    first.wait_for_selector("#conn[data-state=open]")
    device_context, device = other_device(ui_browser, asgi_server, "traveller")
    try:
        llm.set_json(title="Garden plans")
        llm.queue(
            Turn(pieces=["Plant ", "tomatoes."]),
            Turn(pieces=[f"tok{i} " for i in range(60)], gap_s=0.05),
        )
        send(first, "What to plant?")
        first.wait_for_selector(".chat-item-open:has-text('Garden plans')")
        device.wait_for_selector(".chat-item-open:has-text('Garden plans')", timeout=SYNC_MS)
        device.click(".chat-item-open:has-text('Garden plans')")
        device.wait_for_selector(".msg-assistant .msg-body:has-text('Plant tomatoes.')")
        assert device.inner_text(".msg-user .msg-body") == "What to plant?"

        send(first, "Count for me")
        device.wait_for_selector(".msg-assistant .msg-body:has-text('tok3')", timeout=10_000)
        device.wait_for_selector(".msg-user .msg-body:has-text('Count for me')", timeout=SYNC_MS)
        device.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('tok59')")
        assert device.locator(".msg-user .msg-body").all_inner_texts() == [
            "What to plant?",
            "Count for me",
        ]

        _menu(first, "Garden plans", "Rename")
        first.fill(".chat-rename", "Vegetables")
        first.press(".chat-rename", "Enter")
        device.wait_for_selector(".chat-item-open:has-text('Vegetables')", timeout=SYNC_MS)
        assert _titles(device) == ["Vegetables"]

        _menu(first, "Vegetables", "Delete")
        first.click("#confirm-yes")
        device.wait_for_selector(".chat-item-open", state="detached", timeout=SYNC_MS)
        assert "deleted in another tab" in device.inner_text("#composer-status")
    finally:
        device_context.close()


def test_a_retry_in_one_page_replaces_the_stopped_answer_in_the_other_too(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=[f"word{i} " for i in range(300)], gap_s=0.05))
    first, second = _two_pages(ui_context, asgi_server, "retrier2")
    send(first, "Count for me")
    first.wait_for_selector(".chat-item .chat-item-open")
    second.wait_for_selector(".chat-item .chat-item-open", timeout=SYNC_MS)
    second.click(".chat-item .chat-item-open")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('word5')", timeout=10_000)
    first.click("#stop")
    first.wait_for_selector(".msg-assistant .msg-status-cancelled")
    second.wait_for_selector(".msg-assistant .msg-status-cancelled")

    llm.queue(Turn(pieces=[f"again{i} " for i in range(60)], gap_s=0.05))
    first.click(".msg-assistant .retry")
    # While the retry streams (its answer not stored yet) and once it is done.
    for answer in (
        ".msg-assistant .msg-body:has-text('again3')",
        ".msg-assistant[data-status=done]",
    ):
        for page in (first, second):
            page.wait_for_selector(answer, timeout=10_000)
            roles = page.locator(".msg").evaluate_all("nodes => nodes.map((n) => n.dataset.role)")
            assert roles == ["user", "assistant"]
            assert page.locator(".msg-status-cancelled").count() == 0
