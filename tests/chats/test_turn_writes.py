"""The writes of a turn (chats.services turn_accept, turn_retry, turn_finish, turn_fail):
each is one transaction, so a failure part-way writes nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import services
from chats.models import Chat, Message, MessageStatus

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
USAGE = {"prompt_tokens": 3, "completion_tokens": 4}


def _id() -> str:
    return str(uuid.uuid4())


class InjectedError(Exception):
    """A failure injected between two writes of one service."""


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=keyed_owner, chat_id=_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


@pytest.fixture
def turn(chat: Chat, keyed_owner: Any) -> tuple[str, str]:
    """An accepted turn of ``chat``: ``(user message id, assistant message id)``."""
    ids = (_id(), _id())
    assert services.turn_accept(
        chat=chat, user=keyed_owner, message_id=ids[0], assistant_message_id=ids[1]
    )
    return ids


def _rows(chat: Chat) -> dict[str, tuple[str, str, bool]]:
    """``{message id: (role, status, has a server copy)}`` of the chat."""
    return {
        m.pk: (m.role, m.status, m.server_content is not None)
        for m in Message.objects.filter(chat=chat)
    }


def _version(chat: Chat) -> tuple[int, int]:
    stored = Chat.objects.get(pk=chat.pk)
    return stored.version, stored.message_count


def _opened(chat: Chat, message_id: str) -> str:
    sealed = Message.objects.get(pk=message_id).server_content or b""
    return services.sealed_text_open(owner_id=chat.owner_id, object_id=message_id, sealed=sealed)


def _finish(chat: Chat, turn: tuple[str, str], **changes: Any) -> None:
    fields: dict[str, Any] = {
        "status": MessageStatus.DONE,
        "content": "the question",
        "reply": "the answer",
        "model": "fake/model",
        "usage": USAGE,
    }
    services.turn_finish(
        chat=chat, message_id=turn[0], assistant_message_id=turn[1], **fields | changes
    )


def test_accepting_a_turn_that_fails_part_way_writes_nothing(
    chat: Chat, keyed_owner: Any, turn: tuple[str, str]
) -> None:
    before, rows = _version(chat), _rows(chat)
    fresh = _id()

    # The chat's version and count are raised first; the insert of the second message
    # (an assistant id already taken) fails.
    with pytest.raises(services.IdInUse):
        services.turn_accept(
            chat=chat, user=keyed_owner, message_id=fresh, assistant_message_id=turn[1]
        )

    assert _rows(chat) == rows
    assert fresh not in _rows(chat)
    assert _version(chat) == before


def test_accepting_a_turn_of_a_chat_deleted_meanwhile_is_not_found(
    chat: Chat, keyed_owner: Any
) -> None:
    Chat.objects.filter(pk=chat.pk).delete()

    with pytest.raises(services.NotFound):
        services.turn_accept(
            chat=chat, user=keyed_owner, message_id=_id(), assistant_message_id=_id()
        )

    assert Message.objects.filter(chat_id=chat.pk).count() == 0


def test_a_retry_reopens_the_message_and_adds_a_new_assistant_message(
    chat: Chat, turn: tuple[str, str]
) -> None:
    _finish(chat, turn, status=MessageStatus.FAILED, reply="")
    version, count = _version(chat)
    new_reply = _id()

    services.turn_retry(chat=chat, message_id=turn[0], assistant_message_id=new_reply)

    rows = _rows(chat)
    assert rows[turn[0]] == ("user", "pending", True)  # the copy kept when it failed
    assert rows[new_reply] == ("assistant", "pending", False)
    assert rows[turn[1]] == ("assistant", "failed", False)
    assert _version(chat) == (version + 2, count + 1)
    # The message is pending now: a second retry racing the first is refused.
    with pytest.raises(services.NotRetryable) as refused:
        services.turn_retry(chat=chat, message_id=turn[0], assistant_message_id=_id())
    assert refused.value.status == "pending"
    with pytest.raises(services.NotFound):
        services.turn_retry(chat=chat, message_id=turn[1], assistant_message_id=_id())


def test_a_retry_that_fails_part_way_leaves_the_message_retryable(
    chat: Chat, turn: tuple[str, str]
) -> None:
    _finish(chat, turn, status=MessageStatus.FAILED, reply="")
    before = _version(chat)

    # The status is written first; the new assistant message's id is taken.
    with pytest.raises(services.IdInUse):
        services.turn_retry(chat=chat, message_id=turn[0], assistant_message_id=turn[1])

    assert _rows(chat)[turn[0]] == ("user", "failed", True)
    assert _version(chat) == before
    services.turn_retry(chat=chat, message_id=turn[0], assistant_message_id=_id())
    assert _rows(chat)[turn[0]] == ("user", "pending", True)


def test_finishing_a_turn_writes_both_statuses_and_the_sealed_copies(
    chat: Chat, turn: tuple[str, str]
) -> None:
    version, _ = _version(chat)

    _finish(chat, turn)

    assert _rows(chat) == {
        turn[0]: ("user", "done", True),
        turn[1]: ("assistant", "done", True),
    }
    assert (_opened(chat, turn[0]), _opened(chat, turn[1])) == ("the question", "the answer")
    reply = Message.objects.get(pk=turn[1])
    assert (reply.model, reply.prompt_tokens, reply.completion_tokens) == ("fake/model", 3, 4)
    question = Message.objects.get(pk=turn[0])
    assert (question.chat_version, reply.chat_version) == (version + 1, version + 2)
    assert _version(chat)[0] == version + 2


def test_finishing_a_turn_keeps_the_answers_language_and_tools_for_every_device(
    chat: Chat, turn: tuple[str, str]
) -> None:
    from chats.sync import message_metadata

    _finish(chat, turn, language="de", tools_offered=("calculator", "unit_convert"))

    reply, question = Message.objects.get(pk=turn[1]), Message.objects.get(pk=turn[0])
    assert (reply.language, question.language) == ("de", "")
    assert (reply.tools_offered, question.tools_offered) == (["calculator", "unit_convert"], [])
    assert [
        (message_metadata(m)["language"], message_metadata(m)["tools_offered"])
        for m in (reply, question)
    ] == [("de", ["calculator", "unit_convert"]), (None, [])]


def test_finishing_a_turn_is_the_chat_lock_and_one_update_per_row(
    chat: Chat, turn: tuple[str, str]
) -> None:
    # It was twelve round trips (a version read after each bump, a check before the
    # user copy, a second update per message): a fifth of the server's thread time
    # with 200 turns at once (bench/turn_overhead.py).
    with CaptureQueriesContext(connection) as queries:
        _finish(chat, turn)

    statements = [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))  # the test's transaction
    ]
    assert [sql.split()[0] for sql in statements] == ["SELECT", "UPDATE", "UPDATE", "UPDATE"]
    assert statements[0].endswith("FOR NO KEY UPDATE")
    assert statements[3].startswith('UPDATE "chats_chat"')


def test_finishing_keeps_no_user_copy_once_the_client_stored_its_own(
    chat: Chat, turn: tuple[str, str]
) -> None:
    services.message_store(chat=chat, message_id=turn[0], encrypted_content="AQID", version=0)

    _finish(chat, turn, status=MessageStatus.CANCELLED, reply="")

    assert _rows(chat) == {
        turn[0]: ("user", "cancelled", False),
        turn[1]: ("assistant", "cancelled", False),
    }
    assert Message.objects.get(pk=turn[0]).encrypted_content == "AQID"


def test_finishing_a_server_managed_turn_keeps_the_question_and_the_title(
    keyed_owner: Any, chat_instance: Any
) -> None:
    chat = services.server_chat_create(user=keyed_owner, chat_id=_id(), instance=chat_instance)
    ids = (_id(), _id())
    services.turn_accept(
        chat=chat, user=keyed_owner, message_id=ids[0], assistant_message_id=ids[1]
    )

    _finish(chat, ids, title="Greeting")

    assert (_opened(chat, ids[0]), _opened(chat, ids[1])) == ("the question", "the answer")
    stored = Chat.objects.get(pk=chat.pk)
    assert (
        services.sealed_text_open(
            owner_id=keyed_owner.pk, object_id=f"{chat.pk}:title", sealed=stored.server_title or b""
        )
        == "Greeting"
    )


def test_finishing_a_turn_that_fails_part_way_writes_nothing(
    chat: Chat, turn: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _version(chat)

    def reply_write_fails(**kwargs: Any) -> None:
        raise InjectedError

    # The user message's status and copy are written first, then the reply's part fails.
    monkeypatch.setattr(services, "_reply_finish", reply_write_fails)
    with pytest.raises(InjectedError):
        _finish(chat, turn)

    assert _rows(chat) == {
        turn[0]: ("user", "pending", False),
        turn[1]: ("assistant", "pending", False),
    }
    assert _version(chat) == before


def test_finishing_a_turn_whose_reply_is_gone_writes_nothing(
    chat: Chat, turn: tuple[str, str]
) -> None:
    Message.objects.filter(pk=turn[1]).delete()
    before = _version(chat)

    with pytest.raises(services.NotFound):
        _finish(chat, turn)

    assert _rows(chat) == {turn[0]: ("user", "pending", False)}
    assert _version(chat) == before


def test_failing_a_turn_fails_its_unfinished_messages_only(
    chat: Chat, keyed_owner: Any, turn: tuple[str, str]
) -> None:
    assert services.turn_fail(message_id=turn[0], assistant_message_id=turn[1]) == 2
    assert {status for _, status, _ in _rows(chat).values()} == {"failed"}

    finished = (_id(), _id())
    services.turn_accept(
        chat=chat, user=keyed_owner, message_id=finished[0], assistant_message_id=finished[1]
    )
    _finish(chat, finished)
    before = _version(chat)
    # A turn whose end was written before its process died keeps its outcome.
    assert services.turn_fail(message_id=finished[0], assistant_message_id=finished[1]) == 0
    assert _rows(chat)[finished[1]] == ("assistant", "done", True)
    assert _version(chat) == before
    assert services.turn_fail(message_id=_id(), assistant_message_id=_id()) == 0


def test_failing_a_turn_that_fails_part_way_writes_nothing(
    chat: Chat, turn: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _version(chat)
    real_write = services._status_write
    writes: list[str] = []

    def second_write_fails(**kwargs: Any) -> int:
        writes.append(kwargs["message_id"])
        if len(writes) == 2:
            raise InjectedError
        return real_write(**kwargs)

    monkeypatch.setattr(services, "_status_write", second_write_fails)
    with pytest.raises(InjectedError):
        services.turn_fail(message_id=turn[0], assistant_message_id=turn[1])

    assert sorted(writes) == sorted(turn)
    assert {status for _, status, _ in _rows(chat).values()} == {"pending"}
    assert _version(chat) == before
