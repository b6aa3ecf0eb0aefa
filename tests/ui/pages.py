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
