"""The "Remember this device" option in the browser: the master key kept as a
non-extractable CryptoKey in IndexedDB across reloads and tabs, until Lock, sign-out or
the session's end."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.backends.cached_db import SessionStore
from django.test import Client

from instances.models import Instance
from tests.ui.pages import PASSPHRASE, PASSWORD, new_user, unlock, watch
from tests.ui.test_chat import instance, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]

# What IndexedDB holds in "openmates-device": per record the user id, the key's flags and
# whether exporting it is refused. [] when the database does not exist.
READ_DEVICE_DB = """
async () => {
  const names = (await indexedDB.databases()).map((d) => d.name);
  if (!names.includes("openmates-device")) return [];
  const db = await new Promise((resolve, reject) => {
    const request = indexedDB.open("openmates-device");
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
  if (!db.objectStoreNames.contains("devices")) { db.close(); return []; }
  const rows = await new Promise((resolve, reject) => {
    const request = db.transaction("devices").objectStore("devices").getAll();
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
  db.close();
  const out = [];
  for (const row of rows) {
    let exportRefused = false;
    try { await crypto.subtle.exportKey("raw", row.key); } catch (error) { exportRefused = true; }
    out.push({
      user_id: row.user_id, extractable: row.key.extractable, algorithm: row.key.algorithm.name,
      usages: [...row.key.usages].sort(), exportRefused, keys: Object.keys(row).sort(),
    });
  }
  return out;
}
"""


def _unlock_remembering(page: Any) -> None:
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert "Anyone who can use this browser profile" in page.inner_text("#unlock-remember-hint")
    page.fill("#unlock-passphrase", PASSPHRASE)
    page.check("#unlock-remember")
    page.click("#unlock-submit")
    page.wait_for_selector("#app:not([hidden])")


def _opens_without_passphrase(page: Any, text: str) -> None:
    """The page unlocks by itself and shows the chat holding ``text``."""
    page.wait_for_selector("#app:not([hidden])")
    assert page.is_hidden("#screen-unlock")
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(f".msg-user .msg-body:has-text('{text}')")
    page.wait_for_selector(".msg-assistant[data-status=done]")


def _chat_with_remembered_key(page: Any, base: str, username: str) -> str:
    """A new user with one answered chat, unlocked again with "remember this device"."""
    new_user(page, base, username)
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Where do kestrels nest?")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    page.reload()
    _unlock_remembering(page)
    return "Where do kestrels nest?"


def _sign_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def test_a_remembered_device_reloads_and_opens_new_tabs_without_the_passphrase_until_locked(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["In ", "cliffs."]))
    page = ui_context.new_page()
    watched = watch(page)
    text = _chat_with_remembered_key(page, asgi_server, "kim")

    [record] = page.evaluate(READ_DEVICE_DB)
    assert record == {
        "user_id": str(User.objects.get(username="kim").pk),
        "extractable": False,
        "algorithm": "AES-GCM",
        "usages": ["unwrapKey", "wrapKey"],
        "exportRefused": True,
        "keys": ["key", "master_key_id", "session", "user_id"],
    }
    page.reload()
    _opens_without_passphrase(page, text)
    second = ui_context.new_page()
    second.goto(f"{asgi_server}/")
    _opens_without_passphrase(second, text)

    page.click("#lock")
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.evaluate(READ_DEVICE_DB) == []
    assert not page.is_checked("#unlock-remember")
    page.reload()
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.is_hidden("#app")
    unlock(page)
    assert [m for m in watched.console if m.startswith("pageerror")] == []


def test_sign_out_forgets_the_remembered_key(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    _chat_with_remembered_key(page, asgi_server, "lee")

    page.click("#signout-form button[type=submit]")
    page.wait_for_url(f"{asgi_server}/accounts/login/")
    assert page.evaluate(READ_DEVICE_DB) == []
    _sign_in(page, asgi_server, "lee")
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.is_hidden("#app")


def test_a_session_ended_on_the_server_forgets_the_remembered_key(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    _chat_with_remembered_key(page, asgi_server, "max")
    [cookie] = [c for c in ui_context.cookies() if c["name"] == "sessionid"]

    SessionStore(cookie["value"]).delete()
    page.reload()
    page.wait_for_url(f"{asgi_server}/accounts/login/")
    assert page.evaluate(READ_DEVICE_DB) == []
    _sign_in(page, asgi_server, "max")
    page.wait_for_selector("#screen-unlock:not([hidden])")


def test_a_record_from_another_session_is_not_used(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    # A record left behind (the sign-in page never ran): a new session does not adopt it.
    page = ui_context.new_page()
    _chat_with_remembered_key(page, asgi_server, "ned")
    client = Client()
    client.force_login(User.objects.get(username="ned"))
    ui_context.clear_cookies()
    ui_context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server}]
    )

    page.reload()
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.is_hidden("#app")
    assert page.evaluate(READ_DEVICE_DB) == []


def test_without_remember_this_device_a_reload_asks_for_the_passphrase(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    new_user(page, asgi_server, "oz")
    page.reload()
    unlock(page)
    assert page.evaluate(READ_DEVICE_DB) == []

    page.reload()
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.is_hidden("#app")
