"""OpenAI's ``user`` on /v1 (docs/api.md §3): recorded, sanitised, on the user message
it came with, and never the choice of whose conversations are used: two keys sending the
same ``user`` (even a real account's name) stay apart. In-process (Django's async test
client), the model scripted at the LiteLLM boundary."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from accounts.instance_keys import instance_key_create
from accounts.models import InstanceApiKey
from chats.models import Chat, Message
from tests.v1.inprocess import script_v1_turn, v1_post

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("inprocess_turns"),
]

CONVERSATION = "OpenMates-Conversation-Id"


async def test_user_is_recorded_sanitised_and_never_chooses_whose_data(
    instance: Any, owner: Any, llm_script: Any
) -> None:
    first = (await sync_to_async(instance_key_create)(instance=instance, name="a"))[1]
    second = (await sync_to_async(instance_key_create)(instance=instance, name="b"))[1]
    script_v1_turn(llm_script, "Once upon a time.")
    script_v1_turn(llm_script, "Another time.")

    made = await v1_post(first, user=f"  {owner.username}\x00\n\u202e ")
    chat_id = made[CONVERSATION]
    other = await v1_post(second, user=owner.username, headers={CONVERSATION: chat_id})
    own = await v1_post(second, user=owner.username)

    assert made.status_code == own.status_code == 200
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "conversation_not_found"
    keys = {k.name: k.user_id async for k in InstanceApiKey.objects.filter(instance=instance)}
    chats = {c.pk: c.owner_id async for c in Chat.objects.filter(instance=instance)}
    assert chats == {chat_id: keys["a"], own[CONVERSATION]: keys["b"]}
    assert owner.pk not in chats.values()
    recorded = {
        (m.chat_id, m.role): m.end_user async for m in Message.objects.filter(chat_id__in=chats)
    }
    assert recorded == {
        (chat_id, "user"): owner.username,
        (chat_id, "assistant"): "",
        (own[CONVERSATION], "user"): owner.username,
        (own[CONVERSATION], "assistant"): "",
    }


async def test_a_user_over_256_characters_is_refused(instance: Any) -> None:
    key = (await sync_to_async(instance_key_create)(instance=instance, name="a"))[1]

    response = await v1_post(key, user="u" * 257)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "user"
    assert not await Chat.objects.filter(instance=instance).aexists()
