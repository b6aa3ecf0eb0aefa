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


@pytest.mark.django_db
def test_accepting_a_message_is_two_statements_the_read_and_the_write(chat: Any, user: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        accepted = actions._accept(
            chat_id=chat.pk,
            user=user,
            message_id=new_id(),
            assistant_message_id=new_id(),
            retry=False,
        )
    assert accepted.started is True
    assert accepted.chat.instance.pk == chat.instance_id
    assert (accepted.role, accepted.done_count) == ("owner", 0)
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))  # the test's transaction
    ]
    # The chat with its role and done count, then the accept as one statement.
    assert len(statements) == 2
    assert statements[0].startswith("SELECT")
    assert '"instances_instancemember"' in statements[0]
    assert statements[1].startswith("WITH")
    assert 'INSERT INTO "chats_message"' in statements[1]


@pytest.mark.django_db
def test_accepting_a_follow_up_reads_its_branch_in_the_same_call(chat: Any, user: Any) -> None:
    def accept(message_id: str, answer_id: str) -> Any:
        return actions._accept(
            chat_id=chat.pk,
            user=user,
            message_id=message_id,
            assistant_message_id=answer_id,
            retry=False,
        )

    first, answer = new_id(), new_id()
    assert accept(first, answer).branch == selectors.Branch(path=(), off_branch=frozenset())
    Message.objects.filter(pk__in=[first, answer]).update(status=MessageStatus.DONE)
    question = new_id()
    with CaptureQueriesContext(connection) as queries:
        accepted = accept(question, new_id())
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    # The chat, the accept, then the branch: the turn itself queries none of them.
    assert len(statements) == 3
    assert accepted.done_count == 2
    assert accepted.branch == selectors.message_branch(chat_id=chat.pk, message_id=question)
    assert accepted.branch.path == (first, answer)


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
