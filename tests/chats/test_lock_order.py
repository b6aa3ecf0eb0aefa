"""Services that lock a chat and one of its messages or embeds never deadlock each other.

Every such service locks the chat row first, then the message or embed; two of them
racing on separate connections therefore queue instead of deadlocking (PostgreSQL would
abort one with ``deadlock detected``, losing e.g. the client's ciphertext).
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from django.db import connection

from chats import services
from chats.models import Chat, Embed, EmbedStatus, Message, MessageStatus
from pipeline.ids import new_id

ROUNDS = 40

pytestmark = pytest.mark.django_db(transaction=True)


def _envelope(body: bytes) -> str:
    return base64.b64encode(b"\x01" + os.urandom(8) + os.urandom(12) + body.ljust(16)).decode()


def _race(first: Callable[[], Any], second: Callable[[], Any]) -> None:
    """Run both at once, each on its own thread and database connection; re-raise errors."""
    barrier = threading.Barrier(2)

    def run(fn: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=10)
            return fn()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(run, first), pool.submit(run, second)]
        for future in futures:
            future.result(timeout=60)


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=keyed_owner,
        chat_id=new_id(),
        instance=chat_instance,
        encrypted_chat_key=_envelope(b"chat key"),
    )


def test_message_store_racing_the_status_update_never_deadlocks(chat: Chat) -> None:
    reply = services.assistant_message_create(chat=chat, message_id=new_id())
    contents = []
    for round_ in range(ROUNDS):
        content = _envelope(f"round {round_}".encode())
        contents.append(content)
        status = MessageStatus.DONE if round_ % 2 else MessageStatus.STREAMING
        _race(
            partial(
                services.message_store,
                chat=chat,
                message_id=reply.pk,
                encrypted_content=content,
                version=round_,
            ),
            partial(services.message_status_set, message_id=reply.pk, status=status),
        )
    stored = Message.objects.get(pk=reply.pk)
    assert stored.version == ROUNDS
    assert stored.encrypted_content == contents[-1]
    assert stored.status == (MessageStatus.DONE if (ROUNDS - 1) % 2 else MessageStatus.STREAMING)
    # Every store and every status update raised the chat's version exactly once.
    assert Chat.objects.get(pk=chat.pk).version == 2 + 2 * ROUNDS


def test_embed_store_racing_the_embed_status_never_deadlocks(chat: Chat) -> None:
    embed = services.embed_create(chat=chat, embed_id=new_id(), tool="web.search")
    for round_ in range(ROUNDS):
        _race(
            partial(
                services.embed_store,
                chat=chat,
                embed_id=embed.pk,
                encrypted_content=_envelope(f"embed {round_}".encode()),
                version=round_,
            ),
            partial(services.embed_status_set, embed_id=embed.pk, status=EmbedStatus.FINISHED),
        )
    assert Embed.objects.get(pk=embed.pk).version == ROUNDS
    assert Chat.objects.get(pk=chat.pk).version == 2 + 2 * ROUNDS


def test_a_kept_reply_racing_the_clients_store_never_deadlocks(chat: Chat) -> None:
    reply = services.assistant_message_create(chat=chat, message_id=new_id())
    for round_ in range(ROUNDS):
        _race(
            partial(
                services.message_store,
                chat=chat,
                message_id=reply.pk,
                encrypted_content=_envelope(f"round {round_}".encode()),
                version=round_,
            ),
            partial(
                services.assistant_reply_keep,
                chat=chat,
                message_id=reply.pk,
                content=f"reply {round_}",
                model="m",
                usage=None,
            ),
        )
    assert Message.objects.get(pk=reply.pk).version == ROUNDS
    assert Chat.objects.get(pk=chat.pk).version == 2 + 2 * ROUNDS


def test_a_turn_finishing_while_its_client_stores_the_question_never_deadlocks(
    chat: Chat,
) -> None:
    for round_ in range(ROUNDS):
        question, reply = new_id(), new_id()
        services.turn_accept(
            chat=chat, user=chat.owner, message_id=question, assistant_message_id=reply
        )
        content = _envelope(f"question {round_}".encode())
        _race(
            partial(
                services.message_store,
                chat=chat,
                message_id=question,
                encrypted_content=content,
                version=0,
            ),
            partial(
                services.turn_finish,
                chat=chat,
                message_id=question,
                assistant_message_id=reply,
                status=MessageStatus.DONE,
                content=f"question {round_}",
                reply=f"reply {round_}",
                model="m",
                usage=None,
            ),
        )
        # Whichever came first, the client's ciphertext is the one copy of the question.
        stored = Message.objects.get(pk=question)
        assert (stored.status, stored.encrypted_content, stored.server_content) == (
            MessageStatus.DONE,
            content,
            None,
        )
    # Each round: two messages accepted, one store, one finish of two messages.
    assert Chat.objects.get(pk=chat.pk).version == 1 + 5 * ROUNDS
