"""API tokens in a real browser: the account page creates one (after the password, shown
once) under the CSP, and Chromium's own WebSocket opens /ws/chat/ with the token
subprotocol (the server must answer ``openmates.v1``, or the browser fails the
handshake), then revoking closes it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from accounts.models import ApiToken
from tests.factories import UserFactory
from tests.ui.pages import PASSWORD, watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Resolves to [protocol, first frame] or ["closed", code]; runs in the page (CSP applies).
OPEN_WITH_TOKEN = """
([url, token]) => new Promise((resolve) => {
  const ws = new WebSocket(url, ["openmates.v1", "openmates.token." + token]);
  ws.addEventListener("close", (event) => { window.tokenSocketClosed = event.code; });
  ws.onmessage = (event) => resolve([ws.protocol, event.data]);
  ws.onclose = (event) => resolve(["closed", event.code]);
})
"""


def test_a_token_made_on_the_page_opens_a_browser_socket_until_revoked(
    asgi_server: str, ui_context: Any
) -> None:
    UserFactory(username="tess")
    page = ui_context.new_page()
    watched = watch(page)
    page.goto(f"{asgi_server}/accounts/login/")
    page.fill("#id_username", "tess")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")

    page.goto(f"{asgi_server}/accounts/tokens/")
    page.fill("#id_name", "browser test")
    page.fill("#id_password", PASSWORD)
    page.click("button.button-primary")
    raw = (page.text_content("[data-testid=new-token]") or "").strip()
    token = ApiToken.objects.get(name="browser test")
    assert raw.startswith(f"om_{token.prefix}_")
    page.click("[data-testid=copy-token]")
    page.wait_for_function("document.querySelector('[data-copy-status]').textContent !== ''")
    assert page.text_content("[data-copy-status]") in (
        "Copied.",
        "Selected: press Ctrl+C (⌘C) to copy.",
    )

    # Another tab of the same origin (so the page's CSP applies) holds the socket.
    holder = ui_context.new_page()
    held = watch(holder)
    holder.goto(f"{asgi_server}/accounts/tokens/")
    ws_url = asgi_server.replace("http://", "ws://") + "/ws/chat/"
    protocol, first = holder.evaluate(OPEN_WITH_TOKEN, [ws_url, raw])
    assert protocol == "openmates.v1"
    assert json.loads(first) == {"type": "task.active", "tasks": []}

    # Reloading the page the POST redirected to creates nothing and shows no token.
    page.reload()
    assert page.locator("[data-testid=new-token]").count() == 0
    assert ApiToken.objects.filter(name="browser test").count() == 1

    # Revoke asks first: dismissed (watch() dismisses every dialog), nothing happens;
    # confirmed, the token is revoked.
    page.click("button[aria-label='Revoke browser test']")
    page.wait_for_timeout(300)
    assert watched.dialogs == [
        "Revoke the API token “browser test”? Programs using it stop working at once."
    ]
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None
    page.evaluate("window.confirm = () => true")
    page.click("button[aria-label='Revoke browser test']")
    page.wait_for_selector("text=Revoked the API token")
    holder.wait_for_function("window.tokenSocketClosed !== undefined")
    assert holder.evaluate("window.tokenSocketClosed") == 4401
    assert held.csp_violations() == []
    assert page.locator("[data-testid=new-token]").count() == 0
    assert watched.csp_violations() == []
