"""The chat list and the storage loop in the browser: rename, pin, delete, cache loss."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from accounts.models import SignupPolicy
from chats import cache
from chats.models import Chat, Message
from instances.models import Instance
from memories import services as memory_services
from pipeline import state
from tests.ui.pages import indexeddb_rows, new_user, unlock
from tests.ui.test_chat import eventually, send
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


def _consent(chat_id: str) -> dict[str, str]:
    # The pipeline's async reader, on a loop of its own (Playwright holds this thread's).
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, state.memory_consent_get(chat_id)).result()


def _remember(instance: Instance, username: str, **texts: str) -> None:
    """Save one memory per category (keyword: category, value: text) for the user."""
    user_id = get_user_model().objects.get(username=username).pk
    with ThreadPoolExecutor(1) as pool:
        for category, content in texts.items():
            saving = memory_services.amemory_create(
                instance=instance, user_id=user_id, category=category, content=content
            )
            pool.submit(asyncio.run, saving).result()


def _row(page: Any, title: str) -> Any:
    return page.locator(".chat-item", has=page.locator(".chat-item-open", has_text=title))


def _menu(page: Any, title: str, action: str) -> None:
    row = _row(page, title)
    row.hover()
    row.get_by_role("button", name=f"{action} {title}").click()


def _titles(page: Any) -> list[str]:
    return [t.strip() for t in page.locator(".chat-item-open").all_inner_texts()]


def test_rename_pin_and_delete_with_confirmation(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(title="Alpha topic")
    llm.queue(Turn(pieces=["One."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "hal")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First chat")
    page.wait_for_selector(".chat-item-open:has-text('Alpha topic')")
    llm.set_json(title="Beta topic")
    llm.queue(Turn(pieces=["Two."]))
    page.click("#new-chat")
    send(page, "Second chat")
    page.wait_for_selector(".chat-item-open:has-text('Beta topic')")
    assert _titles(page) == ["Beta topic", "Alpha topic"]

    # An emptied name is not taken, and the user is told so.
    _menu(page, "Alpha topic", "Rename")
    page.fill(".chat-rename", "  ")
    page.press(".chat-rename", "Enter")
    page.wait_for_selector("#composer-status:has-text('cannot be empty')")
    assert _titles(page) == ["Beta topic", "Alpha topic"]

    # A bidi override and a zero-width space in a name are not kept (the override would
    # show the rest of the name reversed).
    _menu(page, "Alpha topic", "Rename")
    page.fill(".chat-rename", "\u202eRenamed\u200b alpha")
    page.press(".chat-rename", "Enter")
    page.wait_for_selector(".chat-item-open:has-text('Renamed alpha')")
    _menu(page, "Renamed alpha", "Pin")
    page.wait_for_selector(
        ".chat-item:has(.chat-item-pin) .chat-item-open:has-text('Renamed alpha')"
    )
    assert _titles(page) == ["Renamed alpha", "Beta topic"]

    _menu(page, "Beta topic", "Delete")
    page.get_by_role("button", name="Cancel").click()
    assert _titles(page) == ["Renamed alpha", "Beta topic"]
    _menu(page, "Beta topic", "Delete")
    page.click("#confirm-yes")
    page.wait_for_selector(".chat-item-open:has-text('Beta topic')", state="detached")

    assert eventually(lambda: Chat.objects.filter(owner__username="hal").count() == 1)
    kept = Chat.objects.get(owner__username="hal")
    assert kept.pinned is True
    assert "Renamed" not in (kept.encrypted_title or "")
    page.reload()
    unlock(page)
    page.wait_for_selector(
        ".chat-item:has(.chat-item-pin) .chat-item-open:has-text('Renamed alpha')"
    )
    assert _titles(page) == ["Renamed alpha"]
    page.click(".chat-item-open:has-text('Renamed alpha')")
    page.wait_for_selector("#chat-title:has-text('Renamed alpha')")
    assert page.text_content("#chat-title") == "Renamed alpha"


def test_the_list_follows_the_last_message_not_renames_or_titles(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(title="Older topic")
    llm.queue(Turn(pieces=["One."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "ivy")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First chat")
    page.wait_for_selector(".chat-item-open:has-text('Older topic')")
    llm.set_json(title="Newer topic")
    llm.queue(Turn(pieces=["Two."]))
    page.click("#new-chat")
    send(page, "Second chat")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Two.')")
    page.wait_for_selector(".chat-item-open:has-text('Newer topic')")

    _menu(page, "Older topic", "Rename")
    page.fill(".chat-rename", "Older renamed")
    page.press(".chat-rename", "Enter")
    page.wait_for_selector(".chat-item-open:has-text('Older renamed')")
    assert _titles(page) == ["Newer topic", "Older renamed"]

    llm.queue(Turn(pieces=["Three."]))
    page.click(".chat-item-open:has-text('Older renamed')")
    send(page, "Back to the first chat")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Three.')")
    assert _titles(page) == ["Older renamed", "Newer topic"]

    page.reload()
    unlock(page)
    page.wait_for_selector(".chat-item-open:has-text('Newer topic')")
    assert _titles(page) == ["Older renamed", "Newer topic"]


def test_a_server_managed_conversation_reads_in_the_browser_and_stays_read_only(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    from chats import services
    from pipeline.ids import new_id

    page = ui_context.new_page()
    new_user(page, asgi_server, "api_user")
    page.wait_for_selector("#conn[data-state=open]")
    # A conversation the user had through /v1 with their own API token.
    user = get_user_model().objects.get(username="api_user")
    chat = services.server_chat_create(user=user, chat_id=new_id(), instance=instance)
    services.server_chat_title_set(chat=chat, title="Made through the API")
    services.server_message_create(
        chat=chat, message_id=new_id(), role="user", content="Question over the API"
    )
    services.server_message_create(
        chat=chat, message_id=new_id(), role="assistant", content="Answer over the API"
    )

    page.reload()
    unlock(page)
    page.click(".chat-item-open:has-text('Made through the API')")
    page.wait_for_selector(".msg-user .msg-body:has-text('Question over the API')")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Answer over the API')")
    assert "(cannot decrypt)" not in _titles(page)
    assert page.locator("#composer-input").is_disabled()
    assert page.get_attribute("#composer-input", "placeholder") == "Read-only"
    assert "continue it there" in page.inner_text("#read-only-notice")
    # Its name is the server's: the list offers no rename (pin and delete stay).
    row = page.locator(".chat-item:has-text('Made through the API')")
    assert row.locator("button[title=Rename]").count() == 0
    assert row.locator("button[title=Pin]").count() == 1
    # Its title (kept in memory only, never in IndexedDB) is asked for again after a reload.
    page.reload()
    unlock(page)
    page.wait_for_selector(".chat-item-open:has-text('Made through the API')")
    assert "API conversation" not in _titles(page)
    # The reload reopened it: its header follows the title when it arrives.
    page.wait_for_selector("#chat-title:has-text('Made through the API')")
    assert page.is_disabled("#attach")
    # IndexedDB holds no plaintext of it: neither the title nor the messages.
    dumped = indexeddb_rows(page)
    assert chat.pk in dumped
    for plaintext in ("Made through the API", "Question over the API", "Answer over the API"):
        assert plaintext not in dumped


def test_follow_up_after_cache_loss_sends_history_from_this_browser(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Nice ", "to ", "meet ", "you."]), Turn(pieces=["You ", "are ", "Ada."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "ada2")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "My name is Ada")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Nice to meet you.')")
    assert eventually(
        lambda: (
            Message.objects.filter(
                chat__owner__username="ada2", encrypted_content__isnull=False
            ).count()
            == 2
        )
    )
    chat = Chat.objects.get(owner__username="ada2")
    # The AI cache lost the chat, as when it is evicted for newer chats (chat_forget would
    # also mark the chat deleted, which cancels its next turn).
    redis = cache.redis_client()
    redis.delete(cache.ai_key(chat.owner_id, chat.pk))
    redis.zrem(cache.lru_key(chat.owner_id), chat.pk)

    send(page, "What is my name?")

    page.wait_for_selector(".msg-assistant .msg-body:has-text('You are Ada.')")
    main_calls = [r for r in llm.requests if r.get("stream")]
    history = str(main_calls[-1]["messages"])
    assert "My name is Ada" in history
    assert "Nice to meet you." in history


def test_a_second_message_during_an_answer_is_queued_then_answered(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(
        Turn(pieces=[f"slow{i} " for i in range(40)], gap_s=0.05),
        Turn(pieces=["Second ", "answer."]),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "ivy")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Start something long")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('slow2')")

    page.click("#stop", trial=True)
    page.fill("#composer-input", "And then this")
    page.press("#composer-input", "Enter")

    page.wait_for_selector("#composer-status:has-text('Queued')")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Second answer.')")
    assert "slow39" in page.locator(".msg-assistant .msg-body").first.inner_text()


def test_memory_consent_prompt_sends_the_chosen_categories(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Call ", "her."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "max")
    page.wait_for_selector("#conn[data-state=open]")
    # memory.request asks only about categories the user has memories in.
    _remember(instance, "max", decision="I decided to call family more.", relationship="Ana")

    send(page, "Help me decide: should I call my sister?")

    consent = page.get_by_role("form", name="Memory consent")
    consent.wait_for()
    assert sorted(
        consent.locator("input[type=checkbox]").evaluate_all(
            "boxes => boxes.map((box) => box.value)"
        )
    ) == ["decision", "relationship"]
    consent.locator("input[value=relationship]").uncheck()
    consent.get_by_role("button", name="Allow selected").click()

    consent.wait_for(state="detached")
    chat_id = Chat.objects.get(owner__username="max").pk
    answers = eventually(lambda: _consent(chat_id).get("decision") == "allowed")
    assert answers
    assert _consent(chat_id) == {"decision": "allowed", "relationship": "denied"}
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Call her.')")
