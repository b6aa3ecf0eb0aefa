"""Tool cards in the browser against the live app (its own Daphne: the app caches an
instance's tool set in process for a while, and this test changes it with a secret)."""

from __future__ import annotations

from typing import Any

import pytest

from chats.models import Embed, Message
from instances.models import Instance
from instances.services import instance_secret_set
from tests.ui.pages import new_user, unlock
from tests.ui.test_chat import eventually, instance, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]


def test_tool_card_shows_the_running_tool_and_cancels_it(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    instance_secret_set(instance=instance, name="TAVILY_API_KEY", value="tvly-ui-test")
    llm.set_search_delay(20)
    llm.queue(
        Turn(pieces=[], tool_call={"name": "web_search", "arguments": {"query": "OpenMates"}}),
        Turn(pieces=["The ", "search ", "was ", "cancelled."]),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "dan")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "Use web_search to find news about OpenMates")

    card = page.locator(".tool-card[data-status=processing]")
    card.wait_for()
    assert card.locator(".tool-card-name").inner_text() == "web_search"
    card.locator(".tool-cancel").click()

    page.wait_for_selector(".tool-card[data-status=cancelled]")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('The search was cancelled.')")
    assert eventually(
        lambda: Embed.objects.filter(chat__owner__username="dan", status="cancelled").exists()
    )


def test_finished_tool_shows_its_result_and_the_embed_is_stored_encrypted(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(
        Turn(pieces=[], tool_call={"name": "calculator", "arguments": {"expression": "6*7"}}),
        Turn(pieces=["That ", "makes ", "42."]),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "eli")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "Use calculator to work out 6*7")

    card = page.locator(".tool-card[data-status=finished]")
    card.wait_for()
    assert card.locator(".tool-card-name").inner_text() == "calculator"
    assert '"value": 42' in card.locator(".tool-card-result").inner_text()
    page.wait_for_selector(".msg-assistant .msg-body:has-text('That makes 42.')")
    # The reply says which tools the model was offered, and why on hovering.
    badge = page.locator(".msg-assistant .badge-tools")
    assert badge.inner_text().startswith("Tools: ")
    assert "calculator" in badge.inner_text()
    assert "calculator: " in str(badge.get_attribute("title"))
    embed = eventually(
        lambda: Embed.objects.filter(
            chat__owner__username="eli", encrypted_content__isnull=False
        ).first()
    )
    assert embed.status == "finished"
    assert embed.version == 1
    assert "expression" not in embed.encrypted_content
    # After a reload the stored answer keeps the badge (the names: reasons quote the message).
    assert eventually(
        lambda: Message.objects.filter(
            chat__owner__username="eli", role="assistant", tools_offered__contains=["calculator"]
        ).exists()
    )
    page.reload()
    unlock(page)
    page.wait_for_selector(".msg-assistant .msg-body:has-text('That makes 42.')")
    kept = page.locator(".msg-assistant .badge-tools")
    kept.wait_for()
    assert "calculator" in kept.inner_text()
