"""What a turn's start reads: the accept call's queries, the AI cache checked against the
done count read beside it (real PostgreSQL and Redis)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats import cache
from chats.selectors import chat_get_for_user
from pipeline import actions
from pipeline.ids import new_id


@pytest.mark.django_db
def test_accepting_a_message_reads_the_instance_with_the_chat_not_again(
    chat: Any, user: Any
) -> None:
    loaded = chat_get_for_user(chat_id=chat.pk, user=user)  # as the socket looks it up
    assert loaded is not None
    with CaptureQueriesContext(connection) as queries:
        instance, role, started = actions._accept(
            chat=loaded,
            user=user,
            message_id=new_id(),
            assistant_message_id=new_id(),
            retry=False,
        )
    assert started is True
    assert instance.pk == chat.instance_id
    assert role == "owner"
    assert not [q for q in queries.captured_queries if 'FROM "instances_instance"' in q["sql"]]


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
