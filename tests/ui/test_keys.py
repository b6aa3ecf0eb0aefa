"""Encryption set-up, unlock, lock and recovery in the browser against the live app."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from accounts.models import SignupPolicy
from chats.models import UserKeys
from instances.models import Instance
from tests.ui.pages import (
    PASSPHRASE,
    PASSWORD,
    finish_setup,
    set_passphrase,
    sign_up,
    unlock,
    watch,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EXPECTED_CSP = {
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
}


@pytest.fixture
def open_signup(transactional_db: Any) -> Instance:
    instance = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=instance, open_signup=True)
    return instance


@pytest.fixture
def page(ui_context: Any) -> Any:
    return ui_context.new_page()


def _meter_shown(page: Any, selector: str) -> dict[str, Any]:
    """The strength bar's score attribute and drawn width: an empty field shows no bar."""
    return page.eval_on_selector(
        selector,
        "bar => ({score: bar.getAttribute('data-score'), width: getComputedStyle(bar).width})",
    )


def test_set_up_reload_and_unlock_with_the_csp_intact(
    asgi_server: str, open_signup: Instance, page: Any
) -> None:
    watched = watch(page)
    sign_up(page, asgi_server, "ada")
    recovery = set_passphrase(page)
    with page.expect_download() as download:
        page.click("#setup-download")
    assert recovery in Path(download.value.path()).read_text()
    finish_setup(page)

    keys = UserKeys.objects.get(user__username="ada")
    assert keys.kdf["iterations"] >= 600_000
    assert PASSPHRASE not in str(keys.__dict__)

    page.reload()
    page.fill("#unlock-passphrase", "not my passphrase at all")
    page.click("#unlock-submit")
    page.wait_for_selector("#unlock-error:has-text('Wrong passphrase')")
    assert page.is_hidden("#app")
    unlock(page)

    page.click("#lock")
    page.wait_for_selector("#screen-unlock:not([hidden])")
    assert page.is_hidden("#app")
    unlock(page)

    header = httpx.get(f"{asgi_server}/accounts/login/").headers
    assert {d.strip() for d in header["content-security-policy"].split(";")} == EXPECTED_CSP
    assert header["referrer-policy"] == "no-referrer"
    assert watched.csp_violations() == []
    assert [m for m in watched.console if m.startswith("pageerror")] == []
    # The first visit asked for no keys (none existed): no 404 in the console.
    assert [m for m in watched.console if m.startswith("error")] == []


def test_keys_replaced_on_the_server_say_what_to_do(
    asgi_server: str, open_signup: Instance, page: Any
) -> None:
    sign_up(page, asgi_server, "eve")
    set_passphrase(page)
    finish_setup(page)
    # The passphrase-wrapped key swapped for another key's envelope (its key id is not
    # kdf.key_id): what a replacement with foreign material looks like to the browser.
    keys = UserKeys.objects.get(user__username="eve")
    keys.wrapped_master_key = keys.recovery_wrapped_master_key
    keys.save()

    page.reload()
    page.fill("#unlock-passphrase", PASSPHRASE)
    page.click("#unlock-submit")

    page.wait_for_selector("#unlock-error:has-text('do not fit together')")
    shown = page.inner_text("#unlock-error")
    assert "recovery key" in shown
    assert "wrong_key" not in shown
    assert page.is_hidden("#app")


def test_passphrase_equal_to_the_login_password_is_refused(
    asgi_server: str, open_signup: Instance, page: Any
) -> None:
    sign_up(page, asgi_server, "bob")
    page.wait_for_selector("#screen-setup:not([hidden])")
    assert _meter_shown(page, "#setup-strength-bar") == {"score": None, "width": "0px"}
    page.fill("#setup-passphrase", PASSWORD)
    page.fill("#setup-passphrase2", PASSWORD)
    page.fill("#setup-login-password", PASSWORD)
    page.click("#setup-submit")

    page.wait_for_selector("#setup-error:has-text('differ from your login password')")
    assert not UserKeys.objects.filter(user__username="bob").exists()


def test_recovery_key_resets_a_forgotten_passphrase(
    asgi_server: str, open_signup: Instance, page: Any
) -> None:
    sign_up(page, asgi_server, "cy")
    recovery = set_passphrase(page)
    finish_setup(page)
    version = UserKeys.objects.get(user__username="cy").version
    recovery_key_id = UserKeys.objects.get(user__username="cy").recovery_key_id

    page.reload()
    # A second tab waits on its unlock screen while the first resets the passphrase.
    stale = page.context.new_page()
    stale.goto(f"{asgi_server}/")
    stale.wait_for_selector("#screen-unlock:not([hidden])")
    page.click("#unlock-forgot")
    page.wait_for_selector("#recover-passphrase")
    assert _meter_shown(page, "#recover-strength-bar") == {"score": None, "width": "0px"}
    page.fill("#recover-key", "AAAAA-BBBBB-CCCCC-DDDDD")
    page.fill("#recover-passphrase", "a brand new passphrase for cy 7")
    page.fill("#recover-passphrase2", "a brand new passphrase for cy 7")
    page.fill("#recover-login-password", PASSWORD)
    page.click("#recover-submit")
    page.wait_for_selector("#recover-error:has-text('does not fit')")
    # The password field is emptied after a try: sending again says to fill it, not that
    # the (empty) password is wrong.
    assert page.input_value("#recover-login-password") == ""
    page.fill("#recover-key", recovery.lower())
    page.click("#recover-submit")
    assert page.inner_text("#recover-error") == "Enter your login password."
    page.fill("#recover-login-password", PASSWORD)
    page.click("#recover-submit")
    # The used recovery key is replaced by a new one, shown once with the set-up's step.
    page.wait_for_selector("#setup-recovery:not([hidden])")
    assert page.is_visible("#setup-recovery-replaced")
    assert page.is_hidden("#app")
    assert page.is_disabled("#setup-continue")
    new_recovery = page.text_content("#setup-recovery-key") or ""
    assert re.fullmatch(r"[A-Z2-7]{5}(-[A-Z2-7]{1,5})+", new_recovery)
    assert new_recovery != recovery
    finish_setup(page)

    keys = UserKeys.objects.get(user__username="cy")
    assert keys.version == version + 1
    assert keys.recovery_key_id != recovery_key_id
    # The old recovery key opens nothing any more; the new one does.
    page.reload()
    page.wait_for_selector("#screen-unlock:not([hidden])")
    page.click("#unlock-forgot")
    page.fill("#recover-key", recovery)
    page.fill("#recover-passphrase", "yet another passphrase for cy 8")
    page.fill("#recover-passphrase2", "yet another passphrase for cy 8")
    page.fill("#recover-login-password", PASSWORD)
    page.click("#recover-submit")
    page.wait_for_selector("#recover-error:not(:empty)")
    assert page.is_hidden("#setup-recovery")
    assert UserKeys.objects.get(user__username="cy").version == version + 1
    page.click("#recover-back")
    unlock(page, "a brand new passphrase for cy 7")
    # The old passphrase no longer opens the keys in the tab that read them before.
    stale.fill("#unlock-passphrase", PASSPHRASE)
    stale.click("#unlock-submit")
    stale.wait_for_selector("#unlock-error:has-text('Wrong passphrase')")
    assert stale.is_hidden("#app")
    unlock(stale, "a brand new passphrase for cy 7")


def test_lock_in_one_tab_locks_every_tab_of_the_browser(
    asgi_server: str, open_signup: Instance, ui_context: Any
) -> None:
    first = ui_context.new_page()
    sign_up(first, asgi_server, "lin")
    set_passphrase(first)
    finish_setup(first)
    second = ui_context.new_page()
    second.goto(f"{asgi_server}/")
    unlock(second)
    first.fill("#composer-input", "half-typed secret")

    second.click("#lock")
    second.wait_for_selector("#screen-unlock:not([hidden])")
    first.wait_for_selector("#screen-unlock:not([hidden])", timeout=5_000)
    assert first.is_hidden("#app")
    # Nothing decrypted stays in the locked tab's page.
    assert first.locator(".chat-item").count() == 0
    assert first.locator(".msg").count() == 0
    unlock(first)
    assert second.is_visible("#screen-unlock")  # unlocking one tab leaves the other locked
