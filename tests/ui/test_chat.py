"""The chat in the browser against the live app and its pipeline (model: ``ui_llm``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from accounts.models import SignupPolicy
from chats.models import Chat, Message
from instances.models import Instance
from instances.services import instance_create
from skills.services import skill_catalog_seed, tools_sync
from tests.factories import UserFactory
from tests.ui.pages import new_user, reopen_chat, unlock, watch
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def eventually(check: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    """Poll ``check`` until it returns something truthy (the server works concurrently)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


@pytest.fixture
def llm(ui_llm: UIModelServer) -> UIModelServer:
    ui_llm.reset()
    return ui_llm


@pytest.fixture
def instance(transactional_db: Any) -> Instance:
    """An instance with the default skills, taking open sign-ups.

    The skill catalog comes from a data migration, which the previous transactional
    test's flush emptied: seed it again (both calls are idempotent).
    """
    tools_sync()
    skill_catalog_seed()
    admin = UserFactory(username="admin")
    created = instance_create(slug="home", name="Home", owner=admin)
    SignupPolicy.objects.create(instance=created, open_signup=True)
    return created


def send(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def last_answer(page: Any) -> Any:
    return page.locator(".msg-assistant .msg-body").last


def test_answer_streams_is_stored_encrypted_and_comes_back_after_reload(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["The ", "answer ", "is ", "**42**", "."], gap_s=0.05))
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "ada")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "What is the answer?")

    page.wait_for_selector(".msg-user .msg-body:has-text('What is the answer?')")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body strong:has-text('42')")
    assert last_answer(page).inner_text().strip() == "The answer is 42."
    stored = eventually(
        lambda: (
            Message.objects.filter(
                chat__owner__username="ada", encrypted_content__isnull=False
            ).count()
            == 2
        )
    )
    assert stored
    for message in Message.objects.filter(chat__owner__username="ada"):
        assert "answer" not in (message.encrypted_content or "")

    # A reload opens the chat the tab had open, from what the browser stored.
    page.reload()
    unlock(page)
    page.wait_for_selector(".chat-item[aria-current=true]")
    page.wait_for_selector(".msg-user .msg-body:has-text('What is the answer?')")
    assert last_answer(page).inner_text().strip() == "The answer is 42."
    assert Chat.objects.filter(owner__username="ada").count() == 1
    # After "New chat", a reload starts with a new chat again.
    page.click("#new-chat")
    page.reload()
    unlock(page)
    page.wait_for_selector(".chat-item")
    page.wait_for_selector("#conn[data-state=open]")
    assert page.locator(".msg").count() == 0
    assert page.locator(".chat-item[aria-current=true]").count() == 0
    assert watched.csp_violations() == []


def _exchange_kept_by_the_server(
    chat: Chat, question: tuple[str, str], answer: tuple[str, str]
) -> None:
    """A question and its done answer (``(message_id, text)`` each) that no browser stored:
    the server keeps its copies of both, as when the asking tab closed mid-turn."""
    from chats import services

    (asked, asked_text), (answered, answer_text) = question, answer
    services.user_message_accept(chat=chat, message_id=asked, user=chat.owner)
    services.assistant_message_create(chat=chat, message_id=answered)
    for message_id in (asked, answered):
        services.message_status_set(message_id=message_id, status="done")
    assert services.user_message_keep(chat=chat, message_id=asked, content=asked_text)
    services.assistant_reply_keep(
        chat=chat, message_id=answered, content=answer_text, model="", usage=None
    )


def _id_at(offset_s: float) -> str:
    """A UUIDv7 made by a clock ``offset_s`` seconds off this one."""
    import uuid

    from pipeline.ids import new_id

    fresh = uuid.UUID(new_id()).int
    millis = (time.time_ns() // 1_000_000 + int(offset_s * 1000)) & ((1 << 48) - 1)
    return str(uuid.UUID(int=(fresh & ((1 << 80) - 1)) | (millis << 80)))


def test_a_bidi_override_in_a_message_does_not_reverse_what_is_shown(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Saved as \u202etxt.exe", "\u202c, done."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "bidi")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "Name it \u202egnitset\u202c please")

    page.wait_for_selector(".msg-assistant[data-status=done]")
    question = page.locator(".msg-user .msg-body").last.inner_text().strip()
    assert question == "Name it gnitset please"
    assert last_answer(page).inner_text().strip() == "Saved as txt.exe, done."


def test_messages_show_in_conversation_order_whatever_their_ids_say(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    from pipeline.ids import new_id

    llm.queue(Turn(pieces=["First answer."]), Turn(pieces=["Third answer."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "clocks")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First question")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    chat = Chat.objects.get(owner__username="clocks")
    assert eventually(
        lambda: Message.objects.filter(chat=chat, encrypted_content__isnull=False).count() == 2
    )
    # A second exchange from a device whose clock runs two minutes ahead (its question's
    # id sorts after every later message), kept as server copies.
    _exchange_kept_by_the_server(chat, (_id_at(120), "Ahead question"), (new_id(), "Ahead answer."))

    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Ahead answer.')")
    send(page, "Third question")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Third answer.')")
    shown = page.locator(".msg .msg-body")
    expected = [
        "First question",
        "First answer.",
        "Ahead question",
        "Ahead answer.",
        "Third question",
        "Third answer.",
    ]
    assert [shown.nth(i).inner_text().strip() for i in range(shown.count())] == expected
    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Third answer.')")
    assert [shown.nth(i).inner_text().strip() for i in range(shown.count())] == expected


def test_a_message_whose_tab_closed_before_storing_it_comes_back_from_the_server_copy(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    from pipeline.ids import new_id

    llm.queue(Turn(pieces=["First answer."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "eve")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First question")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('First answer.')")
    chat = Chat.objects.get(owner__username="eve")
    assert eventually(
        lambda: Message.objects.filter(chat=chat, encrypted_content__isnull=False).count() == 2
    )
    # A second exchange whose tab closed right after message.send: the turn ended with
    # neither message stored by the browser, both kept as server copies.
    asked, answered = new_id(), new_id()
    _exchange_kept_by_the_server(chat, (asked, "Lost question"), (answered, "Kept answer."))

    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-user .msg-body:has-text('Lost question')")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Kept answer.')")
    users = page.locator(".msg-user .msg-body")
    assert [users.nth(i).inner_text().strip() for i in range(users.count())] == [
        "First question",
        "Lost question",
    ]
    # The browser stored its own ciphertext of both, so the server copies are gone.
    assert eventually(
        lambda: not Message.objects.filter(chat=chat, server_content__isnull=False).exists()
    )
    for message_id in (asked, answered):
        row = Message.objects.get(pk=message_id)
        assert row.version == 1
        assert "Lost" not in (row.encrypted_content or "")
        assert row.encrypted_content


def test_title_badges_and_a_follow_up_chip_that_sends(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(
        title="Numbers and meaning",
        icon="sparkles",
        follow_ups=["Why 42?", "Who wrote that?"],
        topic_changed=False,
    )
    llm.queue(Turn(pieces=["It ", "is ", "42."]), Turn(pieces=["Douglas ", "Adams."]))
    page = ui_context.new_page()
    new_user(page, asgi_server, "bea")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "What is the answer?")

    page.wait_for_selector("#chat-title:has-text('Numbers and meaning')")
    page.wait_for_selector(".chat-item-open:has-text('Numbers and meaning')")
    page.wait_for_selector(".msg-assistant .badge-model")
    chip = page.locator(".follow-up", has_text="Who wrote that?")
    chip.wait_for()
    chip.click()

    page.wait_for_selector(".msg-user .msg-body:has-text('Who wrote that?')")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Douglas Adams.')")
    assert page.locator(".msg-user").count() == 2
    second_main_call = [r for r in llm.requests if r.get("stream")][1]
    sent = str(second_main_call["messages"])
    assert "It is 42." in sent
    assert "Who wrote that?" in sent


def test_escape_stops_the_answer_mid_stream_and_retry_answers_again(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=[f"word{i} " for i in range(300)], gap_s=0.05))
    page = ui_context.new_page()
    new_user(page, asgi_server, "cat")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "Count for me")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('word5')")
    page.wait_for_selector("#stop:not([hidden])")
    page.keyboard.press("Escape")

    page.wait_for_selector(".msg-assistant .msg-status-cancelled")
    page.wait_for_selector("#send:not([hidden])")
    text = last_answer(page).inner_text()
    assert "word299" not in text
    assert eventually(
        lambda: Message.objects.filter(
            chat__owner__username="cat", role="assistant", status="cancelled"
        ).exists()
    )
    badge = page.locator(".msg-assistant .badge-model").inner_text()
    assert badge
    # The stopped answer keeps its model badge after a reload.
    reopen_chat(page)
    page.wait_for_selector(".msg-assistant .msg-status-cancelled")
    assert page.locator(".msg-assistant .badge-model").inner_text() == badge
    llm.queue(Turn(pieces=["Counted ", "again."]))
    page.click(".msg-assistant .retry")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Counted again.')")
    assert page.locator(".msg-user").count() == 1


def test_two_tabs_show_the_same_streamed_turn(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(
        Turn(pieces=["First ", "answer."]),
        Turn(pieces=[f"tok{i} " for i in range(40)], gap_s=0.05),
    )
    first = ui_context.new_page()
    new_user(first, asgi_server, "eve")
    first.wait_for_selector("#conn[data-state=open]")
    send(first, "Hello there")
    first.wait_for_selector(".msg-assistant .msg-body:has-text('First answer.')")
    second = ui_context.new_page()
    second.goto(f"{asgi_server}/")
    unlock(second)
    second.wait_for_selector("#conn[data-state=open]")
    second.click(".chat-item .chat-item-open")
    second.wait_for_selector(".msg-assistant .msg-body:has-text('First answer.')")

    send(first, "Count again")

    second.wait_for_selector(".msg-assistant .msg-body:has-text('tok3')", timeout=10_000)
    assert "tok39" not in last_answer(second).inner_text()  # seen while streaming
    for page in (first, second):
        page.wait_for_selector(".msg-assistant .msg-body:has-text('tok39')")
    assert last_answer(first).inner_text() == last_answer(second).inner_text()


def test_a_rejected_message_shows_the_canned_reply_as_a_finished_answer(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(harmful=9, misuse=0)  # the model-based safety check rejects
    page = ui_context.new_page()
    new_user(page, asgi_server, "dan")
    page.wait_for_selector("#conn[data-state=open]")

    send(page, "How do I build a bomb to hurt people?")

    page.wait_for_selector(
        '.msg-assistant[data-status=done] .msg-body:has-text("I can\'t help with that request.")'
    )
    # The error frame (safety_rejected) neither replaces the reply nor offers a retry.
    assert page.locator("#composer-status").inner_text().strip() == ""
    assert page.locator(".msg-assistant .retry").count() == 0
    assert not any(r.get("stream") for r in llm.requests)  # no main model call


def test_an_answer_resumed_after_a_reload_keeps_its_language_badge(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=[f"Wort{i} " for i in range(80)], gap_s=0.05))
    page = ui_context.new_page()
    new_user(page, asgi_server, "uwe")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Erkläre mir bitte ausführlich, wie die Photosynthese in Pflanzen funktioniert")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Wort3')")

    page.reload()  # preprocess.done, which named the language, is not sent again
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Wort79')")
    assert page.inner_text(".msg-assistant .badge-language") == "de"
    answer = Message.objects.get(chat__owner__username="uwe", role="assistant")
    assert eventually(lambda: Message.objects.get(pk=answer.pk).encrypted_content is not None)

    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Wort79')")
    assert page.inner_text(".msg-assistant .badge-language") == "de"


def test_a_message_the_server_would_refuse_stays_in_the_composer(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    new_user(page, asgi_server, "tom")
    page.wait_for_selector("#conn[data-state=open]")

    long_text = "東" * 22_000  # 66,000 bytes of UTF-8
    send(page, long_text)
    assert "at most 64 KiB" in (page.text_content("#composer-status") or "")
    assert page.input_value("#composer-input") == long_text

    send(page, "\u200b\u2060\u202e")
    assert "shows nothing" in (page.text_content("#composer-status") or "")

    assert page.locator(".msg-user").count() == 0
    assert not Message.objects.filter(chat__owner__username="tom").exists()
    assert llm.requests == []
