"""``manage.py chat``: a server-managed conversation through the same pipeline."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from chats.models import Chat, ChatMode, Message
from chats.services import IdInUse, sealed_text_open

pytestmark = pytest.mark.django_db(transaction=True)


def test_terminal_chat_streams_a_server_managed_conversation(
    instance: Any, owner: Any, llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm_script.reply(text='{"harmful": 0, "misuse": 0}', model="fast")
    llm_script.reply(
        text='{"title": "Greeting", "icon": "wave", "category": "general", "tags": []}',
        model="fast",
    )
    llm_script.reply(text=["Hello ", "from the ", "pipeline."], model="standard")
    llm_script.reply(
        text='{"follow_ups": ["How are you?"], "topic_changed": false, "summary": "Greeted."}',
        model="fast",
    )
    lines = iter(["Say hello to the terminal please", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    out = io.StringIO()
    call_command("chat", instance="demo", stdout=out)
    printed = out.getvalue()
    assert "mate> Hello from the pipeline." in printed
    assert "? How are you?" in printed
    chat = Chat.objects.get(owner=owner, mode=ChatMode.SERVER_MANAGED)
    messages = list(Message.objects.filter(chat=chat).order_by("created_at"))
    assert [(m.role, m.status) for m in messages] == [("user", "done"), ("assistant", "done")]
    texts = [
        sealed_text_open(owner_id=owner.pk, object_id=m.pk, sealed=m.server_content or b"")
        for m in messages
    ]
    assert texts == ["Say hello to the terminal please", "Hello from the pipeline."]


def test_a_user_who_is_not_a_member_cannot_chat_with_the_instance(
    instance: Any, stranger: Any, llm_script: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = iter(["Hello", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    with pytest.raises(CommandError, match="not a member of demo"):
        call_command("chat", instance="demo", user=stranger.username, stdout=io.StringIO())
    assert not Chat.objects.filter(owner=stranger).exists()
    assert llm_script.requests == []


def test_a_terminal_message_not_accepted_whole_leaves_no_message(
    instance: Any, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command made the chat; the accept's two ids are then one (the reply's id is the
    # question's): its second row cannot be written, so no row and no new version remain.
    from pipeline import server_turn
    from pipeline.ids import new_id

    made: list[str] = []

    def reply_reuses_the_question_id() -> str:
        made.append(made[0] if len(made) == 1 else new_id())
        return made[-1]

    monkeypatch.setattr(server_turn, "new_id", reply_reuses_the_question_id)
    lines = iter(["Hello there", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    with pytest.raises(IdInUse):
        call_command("chat", instance="demo", stdout=io.StringIO())
    assert made[0] == made[1]
    chat = Chat.objects.get(owner=owner, mode=ChatMode.SERVER_MANAGED)
    assert list(Message.objects.filter(chat=chat)) == []
    assert (chat.version, chat.message_count) == (1, 0)


def test_library_info_lines_stay_off_the_terminal_but_warnings_show(
    instance: Any, owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    terminal = io.StringIO()
    handler = logging.StreamHandler(terminal)
    root = logging.getLogger()
    root.addHandler(handler)
    monkeypatch.setattr(root, "level", logging.INFO)

    def chatty_input(prompt: str = "") -> str:
        logging.getLogger("httpx2").info("HTTP Request: POST http://127.0.0.1:8088/v1")
        logging.getLogger("urllib3.connectionpool").info("Starting new HTTP connection")
        logging.getLogger("hvac.adapters").warning("Vault is sealed")
        logging.getLogger("pipeline.turn").warning("the standard tier has no key")
        logging.getLogger("pipeline.turn").info("turn started")
        return ""

    monkeypatch.setattr("builtins.input", chatty_input)
    try:
        call_command("chat", instance="demo", stdout=io.StringIO())
    finally:
        root.removeHandler(handler)

    assert terminal.getvalue().splitlines() == [
        "Vault is sealed",
        "the standard tier has no key",
        "turn started",
    ]
    assert handler.filters == []
