"""What a turn's start reads: the accept call's queries, the AI cache checked against the
done count read beside it (real PostgreSQL and Redis)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import cache, selectors
from chats.models import Chat, Message, MessageStatus
from pipeline import actions
from pipeline.ids import new_id


def _sent(queries: CaptureQueriesContext) -> list[str]:
    """The statements a block sent, without the test transaction's savepoints."""
    return [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]


def _accept(chat: Any, user: Any, message_id: str, answer_id: str, **kwargs: Any) -> Any:
    return actions._accept(
        chat_id=chat.pk,
        user=user,
        message_id=message_id,
        assistant_message_id=answer_id,
        retry=False,
        **kwargs,
    )


@pytest.mark.django_db
def test_accepting_a_message_is_one_round_trip_the_read_the_write_and_the_branch(
    chat: Any, user: Any
) -> None:
    question, answer = new_id(), new_id()
    with CaptureQueriesContext(connection) as queries:
        accepted = _accept(chat, user, question, answer)
    assert accepted.started is True
    assert accepted.chat.instance.pk == chat.instance_id
    assert (accepted.role, accepted.done_count) == ("owner", 0)
    statements = _sent(queries)
    # The chat with its role and done count, the write, and the branch: one query string.
    assert len(statements) == 1
    assert '"instances_instancemember"' in statements[0]
    assert 'INSERT INTO "chats_message"' in statements[0]
    assert statements[0].endswith(f"\"chat_id\" = '{chat.pk}'")
    written = Message.objects.filter(chat=chat).order_by("chat_version")
    assert [(m.pk, m.role, m.status, m.parent_id) for m in written] == [
        (question, "user", "pending", None),
        (answer, "assistant", "pending", question),
    ]
    bumped = Chat.objects.get(pk=chat.pk)
    assert (bumped.version, bumped.message_count) == (chat.version + 2, chat.message_count + 2)
    assert [m.chat_version for m in written] == [bumped.version - 1, bumped.version]


@pytest.mark.django_db
def test_accepting_a_follow_up_reads_its_branch_in_the_same_call(chat: Any, user: Any) -> None:
    first, answer = new_id(), new_id()
    assert _accept(chat, user, first, answer).branch == selectors.NO_BRANCH
    Message.objects.filter(pk__in=[first, answer]).update(status=MessageStatus.DONE)
    question = new_id()
    with CaptureQueriesContext(connection) as queries:
        accepted = _accept(chat, user, question, new_id())
    # The turn itself queries none of them.
    assert len(_sent(queries)) == 1
    assert accepted.done_count == 2
    assert accepted.branch == selectors.message_branch(chat_id=chat.pk, message_id=question)
    assert accepted.branch.path == (first, answer)
    assert Message.objects.get(pk=question).parent_id == answer


@pytest.mark.django_db
def test_a_refused_accept_writes_nothing_and_says_why(chat: Any, user: Any) -> None:
    from instances.models import InstanceMember
    from pipeline.protocol import ErrorCode, FrameError

    stranger = User.objects.create_user("stranger")
    with pytest.raises(FrameError) as not_found:
        _accept(chat, stranger, new_id(), new_id())
    assert not_found.value.code == ErrorCode.NOT_FOUND
    first, answer = new_id(), new_id()
    assert _accept(chat, user, first, answer).started is True
    question = new_id()
    for parent, code in ((first, ErrorCode.INVALID_FRAME), (new_id(), ErrorCode.NOT_FOUND)):
        with pytest.raises(FrameError) as bad_parent:
            _accept(chat, user, question, new_id(), parent_id=parent)
        assert bad_parent.value.code == code
    InstanceMember.objects.filter(instance_id=chat.instance_id, user=user).delete()
    with pytest.raises(FrameError) as forbidden:
        _accept(chat, user, question, new_id())
    assert forbidden.value.code == ErrorCode.FORBIDDEN
    assert set(Message.objects.filter(chat=chat).values_list("pk", flat=True)) == {first, answer}
    assert Chat.objects.get(pk=chat.pk).version == chat.version + 2


@pytest.mark.django_db
def test_a_message_sent_again_is_a_duplicate_and_a_named_answer_its_parent(
    chat: Any, user: Any
) -> None:
    first, answer = new_id(), new_id()
    assert _accept(chat, user, first, answer).started is True
    # The same message again (a reconnecting client): nothing new, not started.
    again = _accept(chat, user, first, new_id())
    assert again.started is False
    assert Message.objects.filter(chat=chat).count() == 2
    # An edit of the first question: a sibling after no parent, then after a named answer.
    edit, after = new_id(), new_id()
    assert _accept(chat, user, edit, new_id(), parent_id=None).started is True
    assert _accept(chat, user, after, new_id(), parent_id=answer).started is True
    assert Message.objects.get(pk=edit).parent_id is None
    assert Message.objects.get(pk=after).parent_id == answer


@pytest.mark.django_db(transaction=True)
def test_the_accept_commits_without_waiting_for_the_flush_and_only_itself(
    chat: Any, user: Any, settings: Any
) -> None:
    with connection.cursor() as cursor:
        # The mechanism: SET LOCAL holds for the query string's implicit transaction only.
        cursor.execute("SET LOCAL synchronous_commit = off; SHOW synchronous_commit")
        cursor.nextset()
        assert cursor.fetchone() == ("off",)
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)
    first = new_id()
    with CaptureQueriesContext(connection) as queries:
        assert _accept(chat, user, first, new_id()).started is True
    assert _sent(queries)[0].startswith("SET LOCAL synchronous_commit = off; WITH found AS")
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("on",)
    # Sent again outside any transaction: the clash rolls the string back, the steps tell.
    assert _accept(chat, user, first, new_id()).started is False
    settings.TURN_ACCEPT_SYNCHRONOUS_COMMIT = True
    with CaptureQueriesContext(connection) as queries:
        assert _accept(chat, user, new_id(), new_id()).started is True
    assert _sent(queries)[0].startswith("WITH found AS")
    assert Message.objects.filter(chat=chat).count() == 4


def test_the_cached_history_is_judged_by_the_done_count_read_beside_it() -> None:
    two = [{"message_id": "a", "role": "user", "content": "q"}, {"message_id": "b"}]
    assert cache.CachedHistory(messages=[]).complete_for(0) == cache.HistoryResult([])
    assert cache.CachedHistory(messages=[]).complete_for(2) == cache.HistoryResult(
        None, "cache_miss"
    )
    assert cache.CachedHistory(messages=two).complete_for(3) == cache.HistoryResult(
        None, "incomplete"
    )
    assert cache.CachedHistory(messages=two).complete_for(2) == cache.HistoryResult(two)
    assert cache.CachedHistory(messages=None).complete_for(0) == cache.HistoryResult(
        None, "decryption_failed"
    )


@pytest.mark.django_db
def test_the_accept_read_counts_done_messages_and_sees_a_removed_member(
    chat: Any, user: Any
) -> None:
    from chats import services
    from chats.models import MessageStatus
    from instances.models import InstanceMember

    for status in (MessageStatus.DONE, MessageStatus.FAILED):
        question, answer = new_id(), new_id()
        assert services.turn_accept(
            chat=chat, user=user, message_id=question, assistant_message_id=answer
        )
        services.turn_finish(
            chat=chat,
            message_id=question,
            assistant_message_id=answer,
            status=status,
            content="q",
            reply="a",
            model="fake/model",
            usage=None,
        )
    found = selectors.turn_chat_get(chat_id=chat.pk, user=user)
    assert found is not None
    assert (found.role, found.done_count) == ("owner", 2)  # the failed exchange is not done
    assert found.chat.instance.pk == chat.instance_id

    InstanceMember.objects.filter(instance_id=chat.instance_id, user=user).delete()
    removed = selectors.turn_chat_get(chat_id=chat.pk, user=user)
    assert removed is not None
    assert removed.role is None
    assert selectors.turn_chat_get(chat_id=new_id(), user=user) is None


@pytest.mark.django_db
def test_the_turn_chat_is_the_chat_and_instance_the_orm_loads(chat: Any, user: Any) -> None:
    Chat.objects.filter(pk=chat.pk).update(server_title=b"\x00sealed", pinned=True)
    found = selectors.turn_chat_get(chat_id=chat.pk, user=user)
    loaded = Chat.objects.select_related("instance").get(pk=chat.pk)
    assert found is not None
    for model, expected in ((found.chat, loaded), (found.chat.instance, loaded.instance)):
        for field in type(expected)._meta.concrete_fields:
            value, wanted = getattr(model, field.attname), getattr(expected, field.attname)
            assert (field.attname, value, type(value)) == (field.attname, wanted, type(wanted))
    # The instance came with the row: reading it asks nothing more.
    with CaptureQueriesContext(connection) as queries:
        assert found.chat.instance.tier_map == loaded.instance.tier_map
    assert queries.captured_queries == []
    assert found.chat._state.adding is False
    # Someone else's chat is not found.
    stranger = User.objects.create_user("stranger")
    assert selectors.turn_chat_get(chat_id=chat.pk, user=stranger) is None
