"""Helpers that drive the app's pages in Playwright (sync API)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PASSWORD = "correct horse battery staple"
PASSPHRASE = "violet tractor moonlight harbour 42"
TIMEOUT_MS = 20_000


@dataclass
class Watched:
    """A page plus what it logged: console messages, dialogs, requests."""

    page: Any
    console: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def csp_violations(self) -> list[str]:
        return [m for m in self.console if "Content Security Policy" in m or "Refused to" in m]


def watch(page: Any) -> Watched:
    watched = Watched(page)
    page.on("console", lambda message: watched.console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: watched.console.append(f"pageerror: {error}"))

    def on_dialog(dialog: Any) -> None:
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("request", lambda request: watched.requests.append(request.url))
    page.set_default_timeout(TIMEOUT_MS)
    return watched


def sign_up(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/signup/")
    page.fill("#id_username", username)
    page.fill("#id_email", f"{username}@example.test")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def set_passphrase(page: Any, passphrase: str = PASSPHRASE) -> str:
    """Fill the set-up screen; returns the recovery key shown once."""
    page.wait_for_selector("#screen-setup:not([hidden])")
    page.fill("#setup-passphrase", passphrase)
    page.fill("#setup-passphrase2", passphrase)
    page.fill("#setup-login-password", PASSWORD)
    page.click("#setup-submit")
    page.wait_for_selector("#setup-recovery:not([hidden])")
    recovery = page.text_content("#setup-recovery-key") or ""
    assert re.fullmatch(r"[A-Z2-7]{5}(-[A-Z2-7]{1,5})+", recovery)
    return recovery


def finish_setup(page: Any) -> None:
    page.check("#setup-saved")
    page.click("#setup-continue")
    page.wait_for_selector("#app:not([hidden])")


def unlock(page: Any, passphrase: str = PASSPHRASE) -> None:
    page.wait_for_selector("#screen-unlock:not([hidden])")
    page.fill("#unlock-passphrase", passphrase)
    page.click("#unlock-submit")
    page.wait_for_selector("#app:not([hidden])")


def new_user(page: Any, base: str, username: str) -> str:
    """Sign up and set up encryption; returns the recovery key."""
    sign_up(page, base, username)
    recovery = set_passphrase(page)
    finish_setup(page)
    return recovery


def open_first_chat(page: Any) -> None:
    """Unlock a (re)loaded page and open the first chat of the list once it is connected;
    returns when the chat's messages show."""
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-user")


def reopen_chat(page: Any) -> None:
    """Reload the page, unlock, and open the first chat of the list (:func:`open_first_chat`)."""
    page.reload()
    open_first_chat(page)


# Rows of the page's IndexedDB databases, as JSON text: each store's rows as one JSON array,
# the arrays joined by spaces; only the stores named `store` when it is a string.
_INDEXEDDB_ROWS = """
async (store) => {
  const out = [];
  for (const { name } of await indexedDB.databases()) {
    const db = await new Promise((ok, bad) => {
      const request = indexedDB.open(name);
      request.onsuccess = () => ok(request.result);
      request.onerror = () => bad(request.error);
    });
    for (const each of db.objectStoreNames) {
      if (store !== null && each !== store) continue;
      const rows = await new Promise((ok, bad) => {
        const request = db.transaction(each).objectStore(each).getAll();
        request.onsuccess = () => ok(request.result);
        request.onerror = () => bad(request.error);
      });
      out.push(JSON.stringify(rows));
    }
    db.close();
  }
  return out.join(" ");
}
"""


def indexeddb_rows(page: Any, store: str | None = None) -> str:
    """What the page keeps in IndexedDB, for canary scans: every row of every store of
    every database (or of the stores named ``store``) as JSON text; ``"[]"`` for one empty
    store, ``""`` when there is no such store."""
    return str(page.evaluate(_INDEXEDDB_ROWS, store))


def other_device(browser: Any, base: str, username: str) -> tuple[Any, Any]:
    """A fresh browser profile of ``username`` (another device), signed in, unlocked and
    connected: ``(context, page)``."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    return context, page
