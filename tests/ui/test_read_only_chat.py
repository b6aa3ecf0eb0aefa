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
from tests.ui.pages import new_user, other_device, unlock
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


UNDECRYPTABLE = (
    "Read-only here: this chat's key cannot be opened in this browser,"
    " so nothing new can be written to it."
)


def test_a_chat_whose_key_cannot_be_opened_is_listed_and_read_only(
    asgi_server: str,
    instance: Instance,
    ui_llm: UIModelServer,
    ui_context: Any,
    ui_browser: Any,
) -> None:
    from chats.models import Chat

    ui_llm.reset()
    ui_llm.queue(Turn(pieces=["Sealed ", "reply."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "vera")
    page.wait_for_selector("#conn[data-state=open]")
    _send(page, "Keep this one")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Sealed reply.')")
    # The wrapped chat key is damaged on the server (one character of its ciphertext):
    # a device that never held the key cannot open it.
    chat = Chat.objects.get(owner__username="vera")
    wrapped = chat.encrypted_chat_key
    middle = len(wrapped) // 2
    damaged = wrapped[:middle] + ("A" if wrapped[middle] != "A" else "B") + wrapped[middle + 1 :]
    Chat.objects.filter(pk=chat.pk).update(encrypted_chat_key=damaged)

    context, device = other_device(ui_browser, asgi_server, "vera")
    try:
        device.click(".chat-item-open:has-text('(cannot decrypt)')")
        device.wait_for_selector("#composer-input:disabled")
        assert device.inner_text("#read-only-notice") == UNDECRYPTABLE
        assert device.is_disabled("#send")
        assert device.is_disabled("#attach")
        assert Chat.objects.get(pk=chat.pk).message_count == 2
        # In the place of the messages, why they are not shown (not an empty chat).
        device.wait_for_selector("#empty-state:has-text('This chat has 2 messages')")
        assert device.inner_text("#empty-state") == (
            "This chat has 2 messages, but its key cannot be opened in this browser (it is"
            " wrapped under another key), so they cannot be shown here."
        )
        assert device.locator(".msg").count() == 0
    finally:
        context.close()
