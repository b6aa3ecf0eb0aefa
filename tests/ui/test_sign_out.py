"""Signing out closes the user's other sockets with 4401.

In a module of its own, so its Daphne has not seen a chat socket close before: at the
time of writing, once one ``ChatConsumer`` has disconnected, the other sockets of that
process stop receiving channel-layer messages (a pipeline bug, reported; a plain
Channels consumer on the same layer does not show it).
"""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance
from tests.ui.pages import finish_setup, set_passphrase, sign_up, unlock, watch
from tests.ui.test_keys import open_signup

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["open_signup"]

# Logs the close code of every WebSocket the page opens ("websocket closed 4401"); the log
# outlives the page's navigation to the login page, where window state would not.
LOG_SOCKET_CLOSES = """
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("close", (event) => console.log(`websocket closed ${event.code}`));
  }
};
"""


def test_signing_out_in_one_tab_closes_the_others_socket(
    asgi_server: str, open_signup: Instance, ui_context: Any
) -> None:
    first = ui_context.new_page()
    first.add_init_script(LOG_SOCKET_CLOSES)
    watched = watch(first)
    sign_up(first, asgi_server, "dee")
    set_passphrase(first)
    finish_setup(first)
    first.wait_for_selector("#conn[data-state=open]")
    second = ui_context.new_page()
    second.goto(f"{asgi_server}/")
    unlock(second)

    second.click("#signout-form button[type=submit]")
    second.wait_for_url(f"{asgi_server}/accounts/login/")

    first.wait_for_url(f"{asgi_server}/accounts/login/")
    closes = [m for m in watched.console if m.startswith("log: websocket closed")]
    assert closes == ["log: websocket closed 4401"]
    assert first.locator("#id_username").is_visible()
