"""The data step of ``chats.0002_message_parent``: the linear chats stored before messages
became a tree get each message's parent (docs/architecture.md §3)."""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

import pytest
from django.apps import apps

from chats import services
from chats.models import Chat, Message

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
START = datetime.datetime(2026, 1, 5, 9, 0, tzinfo=datetime.UTC)

backfill = importlib.import_module("chats.migrations.0002_message_parent")

pytestmark = pytest.mark.django_db


def _linear_chat(owner: Any, instance: Any, rows: list[tuple[str, str, int]]) -> list[str]:
    """A chat whose messages ``(role, status, minute)`` carry no parent, as before 0002;
    returns their ids in order. A question and its answer may share a minute (one write)."""
    chat = services.chat_create(
        user=owner, chat_id=str(uuid.uuid4()), instance=instance, encrypted_chat_key=CHAT_KEY
    )
    ids: list[str] = []
    for role, status, minute in rows:
        # Ids in reverse order: the backfill must go by time, not by id.
        message_id = f"{99 - len(ids):02d}" + str(uuid.uuid4())[2:]
        Message.objects.create(id=message_id, chat=chat, role=role, status=status)
        Message.objects.filter(pk=message_id).update(
            created_at=START + datetime.timedelta(minutes=minute)
        )
        ids.append(message_id)
    return ids


def _parents(ids: list[str]) -> list[str | None]:
    by_id = dict(Message.objects.filter(pk__in=ids).values_list("pk", "parent_id"))
    return [by_id[i] for i in ids]


def test_each_message_follows_the_one_before_and_a_retried_answer_is_a_sibling(
    keyed_owner: Any, chat_instance: Any
) -> None:
    first = _linear_chat(
        keyed_owner,
        chat_instance,
        [
            ("user", "done", 0),
            ("assistant", "done", 0),
            ("user", "done", 2),
            ("assistant", "failed", 2),  # then retried: a second answer to the same question
            ("assistant", "done", 3),
            ("user", "done", 5),
            ("assistant", "done", 5),
        ],
    )
    other = _linear_chat(
        keyed_owner, chat_instance, [("user", "done", 1), ("assistant", "done", 1)]
    )

    backfill._chain(apps, None)

    q1, a1, q2, _failed, retried, q3, _a3 = first
    assert _parents(first) == [None, q1, a1, q2, q2, retried, q3]
    assert _parents(other) == [None, other[0]]
    assert Chat.objects.count() == 2


def test_a_chat_with_no_messages_or_one_question_is_left_as_it_is(
    keyed_owner: Any, chat_instance: Any
) -> None:
    lone = _linear_chat(keyed_owner, chat_instance, [("user", "failed", 0)])
    backfill._chain(apps, None)
    assert _parents(lone) == [None]
