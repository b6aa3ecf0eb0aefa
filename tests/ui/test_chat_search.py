"""Search across chats in the browser: over the decrypted titles and messages stored in
IndexedDB (also offline), case- and diacritic-insensitive, highlighted, jumping to the
message."""

from __future__ import annotations

from typing import Any

import pytest

from instances.models import Instance
from tests.ui.pages import new_user, unlock, watch
from tests.ui.test_chat import instance, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]

LONG_ANSWER = [f"Line {n} of a long answer about something else.\n\n" for n in range(60)]

# Whether the element is inside the visible part of the messages' scroller.
IN_VIEW = """
(element) => {
  const box = element.getBoundingClientRect();
  const view = document.getElementById("messages").getBoundingClientRect();
  return box.top >= view.top && box.bottom <= view.bottom;
}
"""


def _chat(page: Any, llm: UIModelServer, title: str, *texts: str) -> None:
    """A new chat titled ``title`` with ``texts`` sent one after another, each answered."""
    llm.set_json(title=title)
    page.click("#new-chat")
    for text in texts:
        done = page.locator(".msg-assistant[data-status=done]").count()
        send(page, text)
        page.wait_for_selector(f".msg-assistant[data-status=done] >> nth={done}")
    page.wait_for_selector(f"#chat-title:has-text('{title}')")


def _search(page: Any, query: str) -> Any:
    """The results of ``query`` once the list shows them."""
    page.fill("#chat-search", query)
    page.wait_for_selector(f"#search-results[data-query='{query}']")
    return page.locator("#search-results .search-result")


def test_search_finds_a_word_of_an_old_chat_and_jumps_to_it(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(*(Turn(pieces=LONG_ANSWER, gap_s=0) for _ in range(2)))
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "sia")
    page.wait_for_selector("#conn[data-state=open]")
    _chat(page, llm, "Travel plans", "When does the Café Zürich open?", "And on Sundays?")
    _chat(page, llm, "Garden", "Which roses like shade?")
    _chat(page, llm, "Cooking", "A recipe for lentil soup")
    page.reload()
    unlock(page)

    results = _search(page, "ZURICH caf")
    assert results.count() == 1
    assert results.first.locator(".search-result-title").inner_text() == "Travel plans"
    assert results.first.locator("mark").all_inner_texts() == ["Caf", "Zürich"]
    assert _search(page, "garden").first.locator("mark").all_inner_texts() == ["Garden"]
    assert _search(page, "roses").first.locator(".search-result-title").inner_text() == "Garden"
    assert _search(page, "kangaroo").count() == 0
    assert page.inner_text("#search-results") == "No matches in the chats stored here."
    # Only punctuation: nothing to look for, said so, and the query stays in the box.
    assert _search(page, "?!").count() == 0
    assert page.inner_text("#search-results") == "Type a word to search: letters or digits."
    assert page.input_value("#chat-search") == "?!"

    _search(page, "zurich").first.click()
    page.wait_for_selector("#chat-title:has-text('Travel plans')")
    # The title shows before the chat's messages are read from IndexedDB and marked.
    page.wait_for_selector(".msg-found")
    found = page.locator(".msg-found")
    assert found.count() == 1
    assert found.get_attribute("data-role") == "user"
    assert found.locator("mark.found").all_inner_texts() == ["Zürich"]
    assert found.evaluate(IN_VIEW)
    last = page.locator(".msg-assistant").last
    assert not last.evaluate(IN_VIEW)
    # Clearing the search takes its marks back; the text stays as it was.
    page.fill("#chat-search", "")
    page.wait_for_selector(".msg-found", state="detached")
    assert page.locator("mark.found").count() == 0
    first_question = page.locator(".msg-user .msg-body").first.inner_text()
    assert first_question == "When does the Café Zürich open?"
    assert [m for m in watched.console if m.startswith("pageerror")] == []


def test_search_works_offline_and_sees_a_message_sent_since_it_was_built(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "teo")
    page.wait_for_selector("#conn[data-state=open]")
    _chat(page, llm, "Birds", "Where do kestrels nest?")
    assert _search(page, "kestrel").count() == 1
    _chat(page, llm, "Weather", "Will it snow in Kraków?")

    ui_context.set_offline(True)
    asked = len(watched.requests)
    results = _search(page, "krakow")
    assert results.first.locator(".search-result-title").inner_text() == "Weather"
    _search(page, "kestrels").first.click()
    page.wait_for_selector(".msg-found mark.found:has-text('kestrels')")
    assert page.inner_text("#chat-title") == "Birds"
    assert watched.requests[asked:] == []
