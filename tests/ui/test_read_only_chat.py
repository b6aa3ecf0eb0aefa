"""A chat of an instance that no longer counts its owner as a member, in the browser: it
stays readable, and the composer says it is read-only instead of sending."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import SignupPolicy
from instances.models import Instance, InstanceMember
from instances.services import instance_create
from skills.services import skill_catalog_seed, tools_sync
from tests.factories import UserFactory
from tests.ui.pages import new_user, unlock
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

READ_ONLY = "Read-only: you are no longer a member of this chat's assistant."


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    """An instance taking open sign-ups (the catalog seeded again after earlier flushes)."""
    tools_sync()
    skill_catalog_seed()
    created = instance_create(slug="home", name="Home", owner=UserFactory(username="admin"))
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def _send(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def test_a_removed_members_chat_is_shown_read_only(
    asgi_server: str, instance: Instance, ui_llm: UIModelServer, ui_context: Any
) -> None:
    ui_llm.reset()
    ui_llm.queue(Turn(pieces=["Hello ", "there."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "rhea")
    page.wait_for_selector("#conn[data-state=open]")
    _send(page, "Say hello, please")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Hello there.')")
    InstanceMember.objects.filter(user__username="rhea").delete()

    _send(page, "And once more?")

    page.wait_for_selector("#composer-input:disabled")
    assert page.get_attribute("#composer-input", "placeholder") == "Read-only"
    assert page.inner_text("#read-only-notice") == READ_ONLY
    assert page.is_disabled("#send")
    assert page.is_disabled("#attach")
    # After a reload the page knows it from the start; the history is still there.
    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Hello there.')")
    assert page.is_disabled("#composer-input")
    assert page.inner_text("#read-only-notice") == READ_ONLY
