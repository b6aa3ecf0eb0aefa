"""File embeds (docs/protocol.md §13): made with their message, listed and read over
REST, and stored with the longer ciphertext a file needs (a tool's embed keeps a reply's
limit)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from chats import services
from chats.models import Chat, Embed
from openmates.ids import FILE_EMBED_CIPHERTEXT_CHARS, MAX_MESSAGE_CIPHERTEXT_CHARS
from pipeline.ids import new_id
from tests.chats.rest import client_envelope, signed_in_client

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    return services.chat_create(
        user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


def _question(chat: Chat, user: Any) -> str:
    message_id = new_id()
    assert services.turn_accept(
        chat=chat, user=user, message_id=message_id, assistant_message_id=new_id()
    )
    return message_id


def _envelope_of_chars(chars: int) -> str:
    """A client envelope exactly ``chars`` characters long (a multiple of 4)."""
    return client_envelope(os.urandom(chars // 4 * 3 - 21))


def test_file_embeds_are_listed_read_and_take_a_files_ciphertext(
    chat: Chat, keyed_owner: Any
) -> None:
    question = _question(chat, keyed_owner)
    first, second = new_id(), new_id()
    services.file_embeds_create(chat=chat, message_id=question, embed_ids=[first, second])
    client = signed_in_client(keyed_owner)

    listed = client.get(f"/api/chats/{chat.pk}/embeds/").json()["embeds"]
    assert listed == [
        {"embed_id": e, "message_id": question, "tool": "file", "status": "finished", "version": 0}
        for e in sorted([first, second])
    ]
    big = _envelope_of_chars(FILE_EMBED_CIPHERTEXT_CHARS)
    assert len(big) == FILE_EMBED_CIPHERTEXT_CHARS
    url = f"/api/chats/{chat.pk}/embeds/{first}/"
    stored = client.put(url, {"encrypted_content": big, "version": 0}, format="json")
    assert stored.status_code == 200, stored.content[:300]
    read = client.get(url).json()
    assert read["encrypted_content"] == big
    assert read["version"] == 1
    too_big = _envelope_of_chars(FILE_EMBED_CIPHERTEXT_CHARS + 4)
    refused = client.put(
        f"/api/chats/{chat.pk}/embeds/{second}/",
        {"encrypted_content": too_big, "version": 0},
        format="json",
    )
    assert refused.status_code == 400
    assert Embed.objects.get(pk=second).encrypted_content is None


def test_a_tool_embed_keeps_a_replys_limit_and_others_see_nothing(
    chat: Chat, keyed_owner: Any, stranger: Any
) -> None:
    tool_embed = new_id()
    services.embed_create(chat=chat, embed_id=tool_embed, tool="web_search")
    client = signed_in_client(keyed_owner)
    over = _envelope_of_chars(MAX_MESSAGE_CIPHERTEXT_CHARS + 4)
    url = f"/api/chats/{chat.pk}/embeds/{tool_embed}/"
    refused = client.put(url, {"encrypted_content": over, "version": 0}, format="json")
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid"
    assert refused.json()["fields"] == {
        "encrypted_content": [
            f"encrypted_content is longer than {MAX_MESSAGE_CIPHERTEXT_CHARS} characters"
        ]
    }
    other = signed_in_client(stranger)
    assert other.get(f"/api/chats/{chat.pk}/embeds/").status_code == 404
    assert other.get(url).status_code == 404
    assert client.get(f"/api/chats/{chat.pk}/embeds/{new_id()}/").status_code == 404


def test_an_embed_id_in_use_elsewhere_is_refused(chat: Chat, keyed_owner: Any) -> None:
    question = _question(chat, keyed_owner)
    taken = new_id()
    services.embed_create(chat=chat, embed_id=taken, tool="web_search")
    with pytest.raises(services.IdInUse):
        services.file_embeds_create(chat=chat, message_id=question, embed_ids=[new_id(), taken])
    assert Embed.objects.filter(tool="file").count() == 0
    # The same message's own file embeds again (a repeated send) are kept as they are.
    mine = new_id()
    services.file_embeds_create(chat=chat, message_id=question, embed_ids=[mine])
    services.file_embeds_create(chat=chat, message_id=question, embed_ids=[mine])
    assert Embed.objects.filter(tool="file").count() == 1
