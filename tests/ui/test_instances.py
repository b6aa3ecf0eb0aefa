"""Invitations and the instance picker in the browser."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.services import invitation_create
from chats.models import Chat
from instances.models import Instance, InstanceMember
from instances.services import instance_member_set
from tests.factories import UserFactory
from tests.ui.pages import PASSWORD, finish_setup, set_passphrase, unlock, watch
from tests.ui.test_chat import eventually, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["llm"]


def test_invited_user_joins_the_invited_instance_and_picks_another_for_a_new_chat(
    asgi_server: str, llm: UIModelServer, ui_context: Any
) -> None:
    Instance.objects.create(slug="home", name="Home")  # the default one, invitation only
    lab = Instance.objects.create(slug="lab", name="Lab")
    boss: Any = UserFactory(username="boss")
    _, token = invitation_create(instance=lab, created_by=boss)
    page = ui_context.new_page()
    watch(page)

    page.goto(f"{asgi_server}/accounts/signup/")
    assert page.locator("text=by invitation only").count() == 1
    page.goto(f"{asgi_server}/accounts/signup/?invite={token}")
    page.wait_for_selector("text=You will join")
    assert "Lab" in page.inner_text("section.card")
    page.fill("#id_username", "joe")
    page.fill("#id_email", "joe@example.test")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")
    set_passphrase(page)
    finish_setup(page)
    joe = InstanceMember.objects.get(user__username="joe")
    assert joe.instance == lab
    assert page.is_hidden("#instance-picker-row")

    home = Instance.objects.get(slug="home")
    instance_member_set(instance=home, user=joe.user, role="member")
    page.reload()
    unlock(page)
    page.wait_for_selector("#instance-picker-row:not([hidden])")
    page.select_option("#instance-picker", "home")
    llm.queue(Turn(pieces=["Hi ", "from ", "home."]))
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Hello home")

    page.wait_for_selector(".msg-assistant .msg-body:has-text('Hi from home.')")
    chat = eventually(lambda: Chat.objects.filter(owner__username="joe").first())
    assert chat.instance == home
    assert page.is_disabled("#instance-picker")
