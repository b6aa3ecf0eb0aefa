"""The memories page and the chat's memory consent in the browser, against the live app.

Memories are embedded by the packaged local model inside the Daphne process; only the
chat model is played (``ui_llm``).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from accounts.models import SignupPolicy
from chats.models import Chat
from instances.models import Instance
from instances.services import instance_create
from memories.models import Memory, MemorySettings
from pipeline import state
from skills.services import skill_catalog_seed, tools_sync
from tests.factories import UserFactory
from tests.ui.pages import new_user, unlock, watch
from tests.ui.test_chat import eventually, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def llm(ui_llm: UIModelServer) -> UIModelServer:
    ui_llm.reset()
    return ui_llm


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    """An instance with the default skills (memory on), taking open sign-ups."""
    tools_sync()
    skill_catalog_seed()
    created = instance_create(slug="home", name="Home", owner=UserFactory(username="admin"))
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def _consent(chat_id: str) -> dict[str, str]:
    # The pipeline's async reader, on a loop of its own (Playwright holds this thread's).
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, state.memory_consent_get(chat_id)).result()


def open_memories(page: Any) -> None:
    page.click("#open-memories")
    page.wait_for_selector("#memories-page:not([hidden])")
    # The counts per category arrive with the settings (options are never "visible").
    page.wait_for_selector("#memories-filter option[value=fact]:has-text('(')", state="attached")


def add_memory(page: Any, category: str, content: str) -> None:
    page.select_option("#memories-add-category", category)
    page.fill("#memories-add-content", content)
    page.click("#memories-add-submit")
    page.wait_for_selector(f".memory-item .memory-content:text-is('{content}')")


def shown(page: Any) -> list[tuple[str, str]]:
    """The listed memories as (category, text), in order."""
    items = page.locator(".memory-item")
    return [
        (
            items.nth(i).locator(".memory-category").inner_text(),
            items.nth(i).locator(".memory-content").inner_text(),
        )
        for i in range(items.count())
    ]


def item(page: Any, content: str) -> Any:
    return page.locator(".memory-item", has=page.locator(f".memory-content:text-is('{content}')"))


def test_add_search_edit_and_delete_a_memory(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "ada")
    open_memories(page)
    page.wait_for_selector("#memories-empty", state="visible")  # the list loads after the counts

    add_memory(page, "preference", "I prefer green tea to coffee.")
    add_memory(page, "fact", "My sister lives in Lisbon.")

    assert shown(page) == [
        ("fact", "My sister lives in Lisbon."),
        ("preference", "I prefer green tea to coffee."),
    ]
    page.wait_for_selector(
        "#memories-filter option[value=fact]:text-is('fact (1)')", state="attached"
    )
    rows = Memory.objects.filter(user__username="ada", instance=instance)
    assert sorted(rows.values_list("category", flat=True)) == ["fact", "preference"]

    page.fill("#memories-search-input", "Lisbon")
    page.press("#memories-search-input", "Enter")
    page.wait_for_selector("#memories-list-title:text-is('Search results for “Lisbon”')")
    assert shown(page)[0] == ("fact", "My sister lives in Lisbon.")

    item(page, "My sister lives in Lisbon.").get_by_role("button", name="Edit").click()
    form = page.get_by_role("form", name="Edit memory")
    form.locator("select").select_option("relationship")
    form.locator("textarea").fill("My sister lives in Porto.")
    form.get_by_role("button", name="Save").click()
    page.wait_for_selector(".memory-item .memory-content:text-is('My sister lives in Porto.')")
    assert eventually(lambda: rows.filter(category="relationship").count() == 1)
    assert page.inner_text("#memories-status") == "Memory saved."

    # A search without hits says so, and the status of the edit before it is gone.
    page.fill("#memories-search-input", "Tokyo -sister -tea")
    page.press("#memories-search-input", "Enter")
    page.wait_for_selector(
        "#memories-list-title:text-is('Search results for “Tokyo -sister -tea”')"
    )
    page.wait_for_selector("#memories-empty:text-is('No memory matches “Tokyo -sister -tea”.')")
    assert page.inner_text("#memories-status") == ""
    page.click("#memories-search-clear")
    page.wait_for_selector("#memories-list-title:text-is('All memories')")
    page.wait_for_selector("#memories-empty", state="hidden")

    item(page, "I prefer green tea to coffee.").get_by_role("button", name="Delete").click()
    item(page, "I prefer green tea to coffee.").wait_for(state="detached")
    assert eventually(lambda: rows.count() == 1)

    page.reload()
    unlock(page)
    page.wait_for_selector("#memories-page:not([hidden])")
    page.wait_for_selector(".memory-item")
    assert shown(page) == [("relationship", "My sister lives in Porto.")]
    page.fill("#memories-search-input", "Porto")
    page.press("#memories-search-input", "Enter")
    page.wait_for_selector("#memories-list-title:text-is('Search results for “Porto”')")
    assert shown(page) == [("relationship", "My sister lives in Porto.")]
    assert watched.csp_violations() == []


def test_switch_export_errors_and_forget_everything_with_confirmation(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any, tmp_path: Path
) -> None:
    page = ui_context.new_page()
    new_user(page, asgi_server, "bea")
    open_memories(page)
    add_memory(page, "event", "My birthday is on 3 May.")
    add_memory(page, "fact", "I work as a nurse.")
    assert page.is_checked("#memories-enabled")

    page.uncheck("#memories-enabled")
    page.wait_for_selector("#memories-status:has-text('Memory is off')")
    settings = MemorySettings.objects.filter(user__username="bea", instance=instance)
    assert eventually(lambda: settings.filter(enabled=False).exists())

    with page.expect_download() as download:
        page.click("#memories-export")
    path = tmp_path / "export.json"
    download.value.save_as(path)
    exported = json.loads(path.read_text())
    page.wait_for_selector("#memories-status:text-is('Exported 2 memories.')")
    assert download.value.suggested_filename == "memories-home.json"
    assert exported["instance"] == "home"
    assert sorted((m["category"], m["content"]) for m in exported["memories"]) == [
        ("event", "My birthday is on 3 May."),
        ("fact", "I work as a nurse."),
    ]

    # A memory deleted elsewhere: the page shows the API's message and code.
    Memory.objects.filter(user__username="bea", category="fact").delete()
    item(page, "I work as a nurse.").get_by_role("button", name="Delete").click()
    page.wait_for_selector("#memories-error:not([hidden])")
    assert page.inner_text("#memories-error") == "memory not found (not_found)"

    page.click("#memories-forget")
    page.wait_for_selector("#confirm-dialog[open]")
    assert "Forget everything Home remembers about you?" in page.inner_text("#confirm-text")
    page.get_by_role("button", name="Cancel").click()
    assert Memory.objects.filter(user__username="bea").count() == 1

    with page.expect_download():
        page.click("#memories-export")
    page.wait_for_selector("#memories-status:text-is('Exported 1 memory.')")

    page.click("#memories-forget")
    page.click("#confirm-yes")
    page.wait_for_selector("#memories-status:text-is('Forgotten: 1 memory.')")
    page.wait_for_selector("#memories-empty:not([hidden])")
    assert Memory.objects.filter(user__username="bea").count() == 0
    assert page.locator(".memory-item").count() == 0


def test_consent_is_shown_in_the_chat_and_can_be_changed(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(facts=[])  # post-processing extracts nothing: only this test's memories
    llm.queue(Turn(pieces=["Call ", "her."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "max")
    open_memories(page)
    add_memory(page, "relationship", "My sister is called Ana.")
    page.click("#memories-close")
    page.wait_for_selector("#conversation:not([hidden])")
    page.wait_for_selector("#conn[data-state=open]")
    assert page.is_hidden("#consent-line")

    send(page, "Help me decide: should I call my sister?")

    consent = page.get_by_role("form", name="Memory consent")
    consent.wait_for()
    # Only a category the user has memories in is asked about.
    assert consent.locator("input[type=checkbox]").evaluate_all(
        "boxes => boxes.map((box) => box.value)"
    ) == ["relationship"]
    consent.get_by_role("button", name="Allow selected").click()
    page.wait_for_selector("#consent-line:not([hidden])")
    assert page.inner_text("#consent-summary") == "Memories: allowed for relationship"
    chat_id = Chat.objects.get(owner__username="max").pk
    assert eventually(lambda: _consent(chat_id).get("relationship") == "allowed")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Call her.')")

    page.click("#consent-change")
    boxes = page.locator("#consent-boxes input[type=checkbox]")
    assert boxes.evaluate_all("boxes => boxes.map((box) => [box.value, box.checked])") == [
        ["preference", False],
        ["fact", False],
        ["event", False],
        ["relationship", True],
        ["decision", False],
        ["general", False],
    ]
    page.uncheck("#consent-boxes input[value=relationship]")
    page.check("#consent-boxes input[value=fact]")
    page.click("#consent-save")

    page.wait_for_selector("#consent-summary:text-is('Memories: allowed for fact')")
    expected = dict.fromkeys(
        ["preference", "event", "relationship", "decision", "general"], "denied"
    ) | {"fact": "allowed"}
    assert eventually(lambda: _consent(chat_id) == expected)
    assert _consent(chat_id) == expected

    page.reload()
    unlock(page)
    page.locator(".chat-item-open").first.click()
    page.wait_for_selector("#consent-summary:text-is('Memories: allowed for fact')")


def _main_requests(llm: UIModelServer) -> list[dict[str, Any]]:
    """The streamed answer requests (not the JSON-schema calls of pre/post-processing)."""
    return [r for r in llm.requests if r.get("stream") and not r.get("response_format")]


def _system_text(request: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content")) for m in request.get("messages", []) if m.get("role") == "system"
    )


def test_a_saved_memory_reaches_the_prompt_once_allowed(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(facts=[])
    llm.queue(Turn(pieces=["Tea, then."]), Turn(pieces=["Green tea again."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "tom")
    open_memories(page)
    add_memory(page, "preference", "I prefer green tea to coffee in the morning.")
    page.click("#memories-close")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "What drink do you recommend for breakfast?")
    consent = page.get_by_role("form", name="Memory consent")
    consent.wait_for()
    consent.get_by_role("button", name="Allow selected").click()
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Tea, then.')")

    send(page, "Can you recommend another drink for breakfast?")
    page.wait_for_selector(
        ".msg-assistant[data-status=done] .msg-body:has-text('Green tea again.')"
    )

    # The consent holds for the chat: no second prompt; the memory is in the second prompt.
    assert page.get_by_role("form", name="Memory consent").count() == 0
    last = _main_requests(llm)[-1]
    assert "Can you recommend another drink for breakfast?" in json.dumps(last["messages"])
    assert "I prefer green tea to coffee in the morning." in _system_text(last)
