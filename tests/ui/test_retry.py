"""Retry replaces the stopped answer in place, and what a reload shows: the Retry button
of an ended answer, the language badges of older answers, one answer per question."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import SignupPolicy
from instances.models import Instance
from tests.ui.pages import new_user, other_device, reopen_chat
from tests.ui.test_chat import send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def llm(ui_llm: UIModelServer) -> UIModelServer:
    ui_llm.reset()
    return ui_llm


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    created = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def _roles(page: Any) -> list[str]:
    return page.locator(".msg").evaluate_all("nodes => nodes.map((n) => n.dataset.role)")


def test_retry_replaces_the_stopped_answer_in_place_and_survives_a_reload(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any, ui_browser: Any
) -> None:
    llm.set_json(language="en")
    llm.queue(
        Turn(pieces=["Hello ", "there."]),
        Turn(pieces=[f"word{i} " for i in range(300)], gap_s=0.05),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "retrier")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Hi")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Hello there.')")
    page.wait_for_selector(".msg-assistant .badge-language")
    send(page, "Count for me")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('word5')")
    page.click("#stop")
    page.wait_for_selector(".msg-assistant .msg-status-cancelled")

    reopen_chat(page)
    page.wait_for_selector(".msg-assistant .msg-status-cancelled")
    assert page.locator(".msg-assistant .retry").count() == 1
    assert page.locator(".msg-assistant").first.locator(".badge-language").inner_text() == "en"

    llm.queue(Turn(pieces=["Counted ", "again."]))
    page.click(".msg-assistant .retry")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Counted again.')")
    assert _roles(page) == ["user", "assistant", "user", "assistant"]
    assert page.locator(".msg-status-cancelled").count() == 0

    reopen_chat(page)
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Counted again.')")
    assert _roles(page) == ["user", "assistant", "user", "assistant"]
    assert page.locator(".msg-assistant .retry").count() == 0
    assert page.locator(".msg-assistant .badge-language").all_inner_texts() == ["en", "en"]

    # Another device reads the answers from the server: their language badges come along.
    device_context, device = other_device(ui_browser, asgi_server, "retrier")
    try:
        device.click(".chat-item .chat-item-open")
        device.wait_for_selector(".msg-assistant .msg-body:has-text('Counted again.')")
        assert device.locator(".msg-assistant .badge-language").all_inner_texts() == ["en", "en"]
    finally:
        device_context.close()


def test_a_stopped_answer_offers_the_same_controls_on_the_device_that_watched_it(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any, ui_browser: Any
) -> None:
    llm.queue(
        Turn(pieces=["Hello ", "there."]),
        Turn(pieces=[f"word{i} " for i in range(300)], gap_s=0.05),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "stopwatcher")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Hi")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Hello there.')")
    device_context, device = other_device(ui_browser, asgi_server, "stopwatcher")
    try:
        device.click(".chat-item .chat-item-open")
        device.wait_for_selector(".msg-assistant .msg-body:has-text('Hello there.')")
        send(page, "Count for me")
        device.wait_for_selector(".msg-assistant .msg-body:has-text('word5')")
        page.click("#stop")
        for shown in (page, device):
            shown.wait_for_selector(".msg-assistant .msg-status-cancelled")
            shown.wait_for_selector(".msg-assistant .retry")
        page.wait_for_timeout(1500)  # the watching device's stored copy arrives meanwhile

        controls = [
            {
                "retry": shown.locator(".msg-assistant .retry").count(),
                "regenerate": shown.locator(".regenerate").count(),
                "edit": shown.locator(".msg-user .edit").count(),
            }
            for shown in (page, device)
        ]
        assert controls[0] == controls[1] == {"retry": 1, "regenerate": 0, "edit": 2}
        # And as a chat opened afterwards shows it, from what was stored.
        reopen_chat(device)
        device.wait_for_selector(".msg-assistant .msg-status-cancelled")
        device.wait_for_selector(".msg-assistant .retry")
        assert device.locator(".regenerate").count() == 0
    finally:
        device_context.close()
