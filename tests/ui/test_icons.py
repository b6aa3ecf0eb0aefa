"""Icons that are controls are drawn (inline SVG, static/js/app/icons.js), never emoji,
which a machine without an emoji font shows as empty boxes: the chat list's menu and pin,
and the chat header's fallback icon; each control keeps its accessible name."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import SignupPolicy
from instances.models import Instance
from tests.ui.pages import new_user, watch
from tests.ui.test_chat import send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# For each element: [its accessible label, the icon's class, its drawn size, its own text].
DRAWN = """
(nodes) => nodes.map((node) => {
  const svg = node.querySelector("svg.icon");
  const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
  return [node.getAttribute("aria-label"), svg ? svg.getAttribute("class") : null,
          Math.round(box.width) > 0 && Math.round(box.height) > 0, node.textContent];
})
"""
# A chat row's width and the widths its title and its menu take of it, in CSS pixels.
WIDTHS = """
(row) => ({
  row: row.getBoundingClientRect().width,
  title: row.querySelector(".chat-item-open").getBoundingClientRect().width,
  menu: row.querySelector(".chat-item-menu").getBoundingClientRect().width,
})
"""
# Emoji anywhere in the app's visible text, the chat header's icon aside (a chat's own).
EMOJI = """
() => {
  const icon = document.getElementById("chat-icon");
  const saved = icon.textContent;
  icon.textContent = "";
  const found = document.getElementById("app").innerText.match(/\\p{Extended_Pictographic}/gu);
  icon.textContent = saved;
  return found || [];
}
"""


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    created = Instance.objects.create(slug="home", name="Home")
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def test_chat_list_controls_are_drawn_icons_with_their_labels(
    asgi_server: str, instance: Instance, ui_llm: UIModelServer, ui_context: Any
) -> None:
    ui_llm.reset()
    ui_llm.set_json(title="Zebra facts", icon="zebra")
    ui_llm.queue(Turn(pieces=["Stripes."]))
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "iris")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Tell me about zebras")
    row = page.locator(".chat-item", has=page.locator(".chat-item-open", has_text="Zebra facts"))
    row.wait_for()
    page.mouse.move(0, 0)
    page.focus("#composer-input")
    # The hidden menu takes no room: the title has the row (its padding and pin aside).
    resting = row.evaluate(WIDTHS)
    row.hover()
    hovered = row.evaluate(WIDTHS)
    before = row.locator(".chat-item-menu button").evaluate_all(DRAWN)
    row.get_by_role("button", name="Pin Zebra facts").click()
    page.wait_for_selector(".chat-item:has(.chat-item-pin)")
    row.hover()
    after = row.locator(".chat-item-menu button, .chat-item-pin").evaluate_all(DRAWN)
    header = page.locator("#chat-icon svg.icon").get_attribute("class")

    assert resting["menu"] == 0, resting
    assert resting["title"] >= resting["row"] - 30, resting
    assert hovered["menu"] >= 60, hovered
    assert hovered["title"] < resting["title"] - 50, hovered
    assert before == [
        ["Rename Zebra facts", "icon icon-pencil", True, ""],
        ["Pin Zebra facts", "icon icon-pin", True, ""],
        ["Delete Zebra facts", "icon icon-trash", True, ""],
    ]
    assert sorted(after) == sorted(
        [
            ["Pinned", "icon icon-pin", True, ""],
            ["Rename Zebra facts", "icon icon-pencil", True, ""],
            ["Unpin Zebra facts", "icon icon-unpin", True, ""],
            ["Delete Zebra facts", "icon icon-trash", True, ""],
        ]
    )
    # "zebra" has no symbol: the fallback is the drawn bubble, not an emoji.
    assert header == "icon icon-chat"
    assert page.evaluate(EMOJI) == []
    assert watched.csp_violations() == []


# The header's symbol for a few icon names, beside whether this browser draws emoji.
HEADER_SYMBOLS = """
async () => {
  const src = document.querySelector("script[type=module][src*='main.js']").src;
  const base = src.slice(0, src.lastIndexOf("/") + 1);
  const { chatIcon } = await import(base + "screen.js");
  const { emojiSupported } = await import(base + "icons.js");
  const shown = (name) => {
    const made = chatIcon(name);
    return typeof made === "string" ? made : made.getAttribute("class");
  };
  return { drawn: emojiSupported(), chat: shown("chat"), zebra: shown("zebra"), none: shown("") };
}
"""


def test_a_chat_icon_is_an_emoji_only_where_the_browser_draws_emoji(
    asgi_server: str, instance: Instance, ui_context: Any
) -> None:
    page = ui_context.new_page()
    new_user(page, asgi_server, "emma")
    page.wait_for_selector("#conn[data-state=open]")

    symbols = page.evaluate(HEADER_SYMBOLS)

    # Without an emoji font (this machine's headless Chromium) "chat" would be an empty box.
    expected_chat = "\U0001f4ac" if symbols["drawn"] else "icon icon-chat"
    assert symbols == {
        "drawn": symbols["drawn"],
        "chat": expected_chat,
        "zebra": "icon icon-chat",
        "none": "",
    }
