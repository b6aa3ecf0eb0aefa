"""The outbox: a message typed while the socket is down stays visible as waiting and is
sent once the socket is back, exactly once; a new chat started offline loses nothing."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import pytest

from accounts.models import SignupPolicy
from chats.models import Message
from instances.models import Instance
from tests.ui.conftest import daphne_process
from tests.ui.pages import indexeddb_rows, new_user, open_first_chat, unlock
from tests.ui.test_chat import eventually, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The page's sockets can be cut (window.__wsDown = true closes them and makes new ones
# fail their handshake: a path without a route is refused, as a stopped server refuses)
# and let through again.
SOCKET_SWITCH = """
(() => {
  const Real = window.WebSocket;
  const open = new Set();
  window.__wsDown = false;
  window.__cutSockets = () => { window.__wsDown = true; for (const s of open) s.close(); };
  window.WebSocket = function (url, protocols) {
    const target = window.__wsDown ? url.replace("/ws/chat/", "/ws/down/") : url;
    const socket = new Real(target, protocols);
    open.add(socket);
    socket.addEventListener("close", () => open.delete(socket));
    return socket;
  };
  window.WebSocket.prototype = Real.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


@pytest.fixture
def llm(ui_llm: UIModelServer) -> UIModelServer:
    ui_llm.reset()
    return ui_llm


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    created = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def _user_messages(username: str) -> list[str]:
    return list(
        Message.objects.filter(chat__owner__username=username, role="user").values_list(
            "id", flat=True
        )
    )


def test_a_message_sent_while_the_socket_is_down_is_delivered_once_after_reconnect(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["First."]), Turn(pieces=["Delivered ", "later."]))
    ui_context.add_init_script(SOCKET_SWITCH)
    page = ui_context.new_page()
    new_user(page, asgi_server, "offline")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Before the cut")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('First.')")

    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn[data-state=reconnecting]")
    assert page.is_enabled("#send")
    send(page, "Typed while offline")
    page.wait_for_selector(".msg-user[data-status=waiting] .msg-status-waiting")
    # Said once the message is kept in IndexedDB (encrypted), just after it shows.
    page.wait_for_selector("#composer-status:has-text('when the connection is back')")
    page.wait_for_timeout(1500)
    assert len(_user_messages("offline")) == 1

    page.evaluate("window.__wsDown = false")
    page.wait_for_selector("#conn[data-state=open]", timeout=15_000)
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Delivered later.')")
    page.wait_for_selector(".msg-user .msg-status-waiting", state="detached")
    assert eventually(lambda: len(_user_messages("offline")) == 2)
    page.wait_for_timeout(1000)
    assert len(_user_messages("offline")) == 2
    texts = page.locator(".msg-user .msg-body").all_inner_texts()
    assert texts == ["Before the cut", "Typed while offline"]
    assert sum(1 for r in llm.requests if r.get("stream")) == 2


def test_a_new_chat_started_offline_keeps_its_text_and_starts_on_reconnect(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Hello ", "offline."]))
    ui_context.add_init_script(SOCKET_SWITCH)
    page = ui_context.new_page()
    new_user(page, asgi_server, "newoff")
    page.wait_for_selector("#conn[data-state=open]")
    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn[data-state=reconnecting]")
    send(page, "A new chat, offline")
    page.wait_for_selector(".msg-user[data-status=waiting]")
    assert "Could not start" not in page.text_content("#composer-status")

    page.evaluate("window.__wsDown = false")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Hello offline.')", timeout=25_000)
    assert eventually(lambda: len(_user_messages("newoff")) == 1)
    assert page.locator(".chat-item").count() == 1


def test_a_message_sent_while_the_server_is_stopped_is_delivered_once_after_it_restarts(
    instance: Instance, llm: UIModelServer, ui_context: Any, tmp_path: Any
) -> None:
    env = {"OPENAI_API_KEY": "sk-ui-test", "SKILLS_WEB_SEARCH_API_BASE": llm.origin}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = llm.api_base
    llm.queue(Turn(pieces=["First."]), Turn(pieces=["After ", "the restart."]))
    page = ui_context.new_page()
    with daphne_process(env, tmp_path) as (base, process):
        new_user(page, base, "restart")
        page.wait_for_selector("#conn[data-state=open]")
        send(page, "Before the stop")
        page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('First.')")
        assert eventually(lambda: len(_user_messages("restart")) == 1)
        process.send_signal(signal.SIGINT)  # as scripts/run stops it
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # what is asserted is the outbox, not the stop
            process.kill()
            process.wait(timeout=10)
    port = int(base.rsplit(":", 1)[1])

    page.wait_for_selector("#conn:not([data-state=open])")
    send(page, "Typed while the server is stopped")
    page.wait_for_selector(".msg-user[data-status=waiting] .msg-status-waiting")
    page.wait_for_timeout(1500)
    assert page.input_value("#composer-input") == ""  # sent to the outbox, not lost
    assert len(_user_messages("restart")) == 1

    with daphne_process(env, tmp_path, port=port):
        page.wait_for_selector("#conn[data-state=open]", timeout=30_000)
        page.wait_for_selector(
            ".msg-assistant .msg-body:has-text('After the restart.')", timeout=30_000
        )
        page.wait_for_selector(".msg-user .msg-status-waiting", state="detached")
        assert eventually(lambda: len(_user_messages("restart")) == 2)
        page.wait_for_timeout(1000)
        assert len(_user_messages("restart")) == 2
        texts = page.locator(".msg-user .msg-body").all_inner_texts()
        assert texts == ["Before the stop", "Typed while the server is stopped"]
        assert sum(1 for r in llm.requests if r.get("stream")) == 2


@pytest.mark.parametrize(
    ("locale", "shown"),
    [
        ("en-US", "The AI provider could not be reached. Try again in a few minutes"),
        ("de-DE", "Der KI-Anbieter ist nicht erreichbar."),
    ],
)
def test_with_the_provider_down_the_failed_answer_says_why_in_the_users_language(
    instance: Instance, ui_browser: Any, tmp_path: Any, locale: str, shown: str
) -> None:
    from tests.ui.conftest import _free_port

    dead = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    env = {"OPENAI_API_KEY": "sk-ui-test"}
    for tier in ("FAST", "STANDARD", "HEAVY"):
        env[f"LLM_{tier}_MODEL"] = "openai/wire-model"
        env[f"LLM_{tier}_API_BASE"] = dead
    context = ui_browser.new_context(locale=locale)
    try:
        page = context.new_page()
        with daphne_process(env, tmp_path) as (base, _process):
            new_user(page, base, f"down{locale[:2]}")
            page.wait_for_selector("#conn[data-state=open]")
            send(page, "Is anyone there?")
            page.wait_for_selector(".msg-assistant[data-status=failed]", timeout=60_000)
            answer = page.locator(".msg-assistant").last.inner_text()
            assert shown in answer
            assert "The answer failed." not in answer
            page.wait_for_selector(".msg-assistant button.retry")
            # After a reload the reason comes with the stored answer (failure_reason).
            page.reload()
            open_first_chat(page)
            page.wait_for_selector(".msg-assistant[data-status=failed]", timeout=30_000)
            answer = page.locator(".msg-assistant").last.inner_text()
            assert shown in answer
            assert "The answer failed." not in answer
    finally:
        context.close()


def test_text_typed_offline_survives_a_reload_and_is_delivered_once(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["First."]), Turn(pieces=["Kept ", "and sent."]))
    ui_context.add_init_script(SOCKET_SWITCH)
    page = ui_context.new_page()
    new_user(page, asgi_server, "reloader")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Before the cut")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('First.')")

    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn[data-state=reconnecting]")
    send(page, "Typed offline then reloaded")
    page.wait_for_selector(".msg-user[data-status=waiting]")
    kept = indexeddb_rows(page, "outbox")
    assert '"kind":"message"' in kept
    assert "Typed offline" not in kept  # the text is kept as ciphertext only
    assert len(_user_messages("reloader")) == 1

    page.reload()  # the socket is let through again on the new page
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Kept and sent.')", timeout=30_000)
    assert eventually(lambda: len(_user_messages("reloader")) == 2)
    page.wait_for_timeout(1000)
    assert len(_user_messages("reloader")) == 2
    texts = page.locator(".msg-user .msg-body").all_inner_texts()
    assert texts == ["Before the cut", "Typed offline then reloaded"]
    assert eventually(lambda: indexeddb_rows(page, "outbox") == "[]")


def test_a_new_chat_started_offline_survives_a_reload(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Made ", "after the reload."]))
    ui_context.add_init_script(SOCKET_SWITCH)
    page = ui_context.new_page()
    new_user(page, asgi_server, "newreload")
    page.wait_for_selector("#conn[data-state=open]")
    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn[data-state=reconnecting]")
    send(page, "A chat begun offline")
    page.wait_for_selector(".msg-user[data-status=waiting]")
    assert '"kind":"chat"' in indexeddb_rows(page, "outbox")

    page.reload()
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Made after the reload.')")
    assert eventually(lambda: len(_user_messages("newreload")) == 1)
    assert eventually(lambda: indexeddb_rows(page, "outbox") == "[]")


def test_a_new_chats_first_message_sent_with_the_network_off_shows_waiting_and_survives(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    """The browser's network goes off (not only the socket): the first message of a new
    chat shows as waiting at once, is kept across a closed tab, and the chat and the
    message reach the server once the network is back."""
    from chats.models import Chat

    llm.queue(Turn(pieces=["Made ", "once online."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "netoff")
    page.wait_for_selector("#conn[data-state=open]")
    page.click("#new-chat")
    ui_context.set_offline(True)
    send(page, "First words, no network")
    page.wait_for_selector(".msg-user[data-status=waiting] .msg-status-waiting", timeout=3_000)
    assert page.locator(".chat-item").count() == 1
    assert '"kind":"message"' in indexeddb_rows(page, "outbox")
    page.close()  # the tab closes while offline

    ui_context.set_offline(False)
    page = ui_context.new_page()
    page.goto(f"{asgi_server}/")
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Made once online.')")
    assert eventually(lambda: len(_user_messages("netoff")) == 1)
    assert Chat.objects.filter(owner__username="netoff").count() == 1
    texts = page.locator(".msg-user .msg-body").all_inner_texts()
    assert texts == ["First words, no network"]
    assert eventually(lambda: indexeddb_rows(page, "outbox") == "[]")
