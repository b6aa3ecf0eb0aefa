"""Telegram through its webhook, against the loopback Bot API: turns, the secret token,
redelivery, groups, /new, people kept apart, long answers split."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from chats.models import Chat, Message
from chats.services import sealed_text_open
from instances.models import ChannelConfig
from messaging.adapters.telegram import SECRET_HEADER, webhook_secret
from messaging.manager import ChannelManager
from messaging.models import ChannelConversation, ChannelIdentity, ChannelState
from tests.messaging.conftest import TELEGRAM_TOKEN, script_turn
from tests.messaging.platform import BOT_USERNAME, PlatformServer

pytestmark = pytest.mark.django_db(transaction=True)


def _update(
    update_id: int,
    text: str,
    *,
    user_id: int = 7,
    chat_id: int | None = None,
    chat_type: str = "private",
    entities: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "message_id": update_id * 10,
        "date": 1_700_000_000,
        "chat": {"id": chat_id or user_id, "type": chat_type},
        "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
        "text": text,
    }
    if entities:
        message["entities"] = entities
    return {"update_id": update_id, "message": message}


async def _post(config: ChannelConfig, payload: Any, *, secret: str | None = None) -> Any:
    token = webhook_secret(bot_token=TELEGRAM_TOKEN, config_id=config.pk)
    return await AsyncClient().post(
        f"/channels/telegram/{config.pk}/",
        data=json.dumps(payload),
        content_type="application/json",
        headers={SECRET_HEADER: token if secret is None else secret},
    )


def _texts(chat_id: str) -> list[tuple[str, str]]:
    chat = Chat.objects.get(pk=chat_id)
    return [
        (
            m.role,
            sealed_text_open(
                owner_id=chat.owner_id, object_id=m.pk, sealed=m.server_content or b""
            ),
        )
        for m in Message.objects.filter(chat=chat).order_by("chat_version")
    ]


async def test_an_update_runs_a_turn_and_the_answer_goes_back(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    script_turn(llm_script, ["Hello ", "from **the** pipeline."])

    before = timezone.now()
    response = await _post(telegram_channel, _update(1, "Hi there"))
    after = timezone.now()
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert response.status_code == 200
    webhook = platform.of("setWebhook")[0].params
    assert webhook["url"] == f"https://mates.example/channels/telegram/{telegram_channel.pk}/"
    assert webhook["secret_token"] == webhook_secret(
        bot_token=TELEGRAM_TOKEN, config_id=telegram_channel.pk
    )
    sent = platform.of("sendMessage")
    assert [(c.params["chat_id"], c.params["text"], c.params["parse_mode"]) for c in sent] == [
        (7, "Hello from <b>the</b> pipeline.", "HTML")
    ]
    assert platform.of("sendChatAction")[0].params["action"] == "typing"
    conversation = await ChannelConversation.objects.select_related("identity__user").aget()
    assert conversation.chat_key == "7:"
    assert conversation.identity.user.username == f"telegram:{telegram_channel.instance_id}:7"
    assert await sync_to_async(_texts)(conversation.chat_id) == [
        ("user", "Hi there"),
        ("assistant", "Hello from **the** pipeline."),
    ]
    state = await ChannelState.objects.aget(config=telegram_channel)
    assert (state.status, state.mode) == ("running", "webhook")
    assert state.last_update_at is not None
    assert before <= state.last_update_at <= after


async def test_a_wrong_or_missing_secret_token_is_403_and_no_turn(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()

    wrong = await _post(telegram_channel, _update(2, "Hi"), secret="not-the-secret")
    missing = await AsyncClient().post(
        f"/channels/telegram/{telegram_channel.pk}/",
        data=json.dumps(_update(3, "Hi")),
        content_type="application/json",
    )
    other = await AsyncClient().post("/channels/telegram/999999/", data="{}",
                                     content_type="application/json")  # fmt: skip

    assert (wrong.status_code, missing.status_code, other.status_code) == (403, 403, 404)
    assert json.loads(wrong.content)["code"] == "permission_denied"
    await manager.adapters[telegram_channel.pk].desk.idle()
    assert llm_script.requests == []
    assert platform.of("sendMessage") == []
    assert not await ChannelIdentity.objects.aexists()


async def test_the_same_update_twice_is_one_turn(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    script_turn(llm_script, "Once.")

    first = await _post(telegram_channel, _update(10, "Say it once"))
    again = await _post(telegram_channel, _update(10, "Say it once"))
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert (first.status_code, again.status_code) == (200, 200)
    assert [c.params["text"] for c in platform.of("sendMessage")] == ["Once."]
    assert manager.adapters[telegram_channel.pk].desk.turns_started == 1


async def test_two_people_never_share_a_conversation_and_new_starts_one(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[telegram_channel.pk]
    script_turn(llm_script, "For Ann.")
    await _post(telegram_channel, _update(20, "I am Ann", user_id=1))
    await adapter.desk.idle()
    script_turn(llm_script, "For Bob.")
    await _post(telegram_channel, _update(21, "I am Bob", user_id=2))
    await adapter.desk.idle()
    await _post(telegram_channel, _update(22, "/new", user_id=1))
    await adapter.desk.idle()
    script_turn(llm_script, "Fresh.")
    await _post(telegram_channel, _update(23, "Again", user_id=1))
    await adapter.desk.idle()

    identities = [i async for i in ChannelIdentity.objects.order_by("platform_user_id")]
    assert [i.platform_user_id for i in identities] == ["1", "2"]
    assert identities[0].user_id != identities[1].user_id
    chats = [c async for c in Chat.objects.order_by("created_at")]
    assert [c.owner_id for c in chats] == [identities[0].user_id, identities[1].user_id,
                                           identities[0].user_id]  # fmt: skip
    assert [c.params["text"] for c in platform.of("sendMessage")] == [
        "For Ann.",
        "For Bob.",
        "Started a new conversation.",
        "Fresh.",
    ]
    # The main call of the fresh conversation saw no earlier message of Ann's.
    fresh_main = [r for r in llm_script.requests if r.model == "standard"][-1]
    assert not any("I am Ann" in str(m.get("content")) for m in fresh_main.messages)


async def test_a_group_message_is_answered_only_when_it_mentions_the_bot(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    mention = f"@{BOT_USERNAME}"
    script_turn(llm_script, "Yes?")

    await _post(telegram_channel, _update(30, "just chatting", chat_id=-5, chat_type="group"))
    await _post(
        telegram_channel,
        _update(31, f"{mention} what time is it", chat_id=-5, chat_type="group",
                entities=[{"type": "mention", "offset": 0, "length": len(mention)}]),
    )  # fmt: skip
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert [(c.params["chat_id"], c.params["text"]) for c in platform.of("sendMessage")] == [
        (-5, "Yes?")
    ]
    main = next(r for r in llm_script.requests if r.model == "standard")
    assert main.messages[-1]["content"] == "what time is it"


async def test_a_longer_username_that_starts_with_the_bots_is_not_a_mention(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    other_bot = f"@{BOT_USERNAME}2"
    mention = f"@{BOT_USERNAME}"
    script_turn(llm_script, "Here.")

    await _post(
        telegram_channel,
        _update(32, f"{other_bot} ping", chat_id=-5, chat_type="group",
                entities=[{"type": "mention", "offset": 0, "length": len(other_bot)}]),
    )  # fmt: skip
    await _post(telegram_channel, _update(33, f"{other_bot} ping", chat_id=-5, chat_type="group"))
    await _post(
        telegram_channel,
        _update(34, f"ask {other_bot}, not you", chat_id=-5, chat_type="group", user_id=8,
                entities=[{"type": "mention", "offset": 4, "length": len(other_bot)}]),
    )  # fmt: skip
    await manager.adapters[telegram_channel.pk].desk.idle()
    ignored = (list(llm_script.requests), platform.of("sendMessage"))
    await _post(
        telegram_channel,
        _update(35, f"Hey {mention}, where is {other_bot}?", chat_id=-5, chat_type="group",
                user_id=9, entities=[
                    {"type": "mention", "offset": 4, "length": len(mention)},
                    {"type": "mention", "offset": 24, "length": len(other_bot)}]),
    )  # fmt: skip
    await manager.adapters[telegram_channel.pk].desk.idle()

    assert ignored == ([], [])
    assert [(c.params["chat_id"], c.params["text"]) for c in platform.of("sendMessage")] == [
        (-5, "Here.")
    ]
    main = next(r for r in llm_script.requests if r.model == "standard")
    assert main.messages[-1]["content"] == f"Hey , where is {other_bot}?"


async def test_a_mention_without_entities_counts_as_a_whole_username(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    script_turn(llm_script, "Yes.")

    await _post(
        telegram_channel,
        _update(36, f"please @{BOT_USERNAME.upper()} say hi", chat_id=-5, chat_type="group"),
    )
    await manager.adapters[telegram_channel.pk].desk.idle()

    main = next(r for r in llm_script.requests if r.model == "standard")
    assert main.messages[-1]["content"] == "please  say hi"


async def test_a_long_answer_is_split_into_valid_messages(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    code = "".join(f"line_{i} = {i} 🎉\n" for i in range(300))
    answer = ("Texte long avec émojis 👩‍👩‍👧. " * 180) + f"\n\n```python\n{code}```\n"
    assert len(answer) > 10_000
    script_turn(llm_script, answer)

    await _post(telegram_channel, _update(40, "Write a lot"))
    await manager.adapters[telegram_channel.pk].desk.idle()

    texts = [c.params["text"] for c in platform.of("sendMessage")]
    assert len(texts) >= 3
    # Telegram counts the text after parsing the HTML, in UTF-16 code units.
    visible = [html.unescape(re.sub(r"<[^>]+>", "", t)) for t in texts]
    assert all(len(v.encode("utf-16-le")) // 2 <= 4096 for v in visible)
    assert all(t.count("<pre") == t.count("</pre>") for t in texts)
    assert sum(t.count("Texte long") for t in texts) == 180
    assert sum(t.count("line_") for t in texts) == 300


def _memories(instance_id: int, user_id: int) -> list[str]:
    from memories import selectors

    rows = list(selectors.memories_for_user(instance_id=instance_id, user_id=user_id))
    opened = selectors.memories_open(rows, instance_id=instance_id, user_id=user_id)
    return [text for _, text in opened]


async def test_two_people_never_share_memories(
    platform: PlatformServer,
    manager: ChannelManager,
    telegram_channel: ChannelConfig,
    llm_script: Any,
    memory_extraction: Any,
    owner: Any,
) -> None:
    from memories.models import Memory

    await manager.reconcile()
    adapter = manager.adapters[telegram_channel.pk]
    people = [(1, "Ann", "I live in Hamburg."), (2, "Bob", "I live in Oslo.")]
    for update_id, (user_id, name, text) in enumerate(people, start=80):
        script_turn(llm_script, f"Noted, {name}.")
        fact = {"category": "fact", "content": f"The user {name} lives in {text[10:-1]}."}
        llm_script.reply(text=json.dumps({"facts": [fact]}), model="fast")  # extraction
        await _post(telegram_channel, _update(update_id, text, user_id=user_id))
        await adapter.desk.idle()

    identities = {i.platform_user_id: i.user_id async for i in ChannelIdentity.objects.all()}
    instance_id = telegram_channel.instance_id
    assert await sync_to_async(_memories)(instance_id, identities["1"]) == [
        "The user Ann lives in Hamburg."
    ]
    assert await sync_to_async(_memories)(instance_id, identities["2"]) == [
        "The user Bob lives in Oslo."
    ]
    assert await sync_to_async(_memories)(instance_id, owner.pk) == []
    assert sorted([m.user_id async for m in Memory.objects.all()]) == sorted(identities.values())
    # Each extraction saw only its own person's exchange.
    extractions = [
        r
        for r in llm_script.requests
        if r.model == "fast" and "sentence about the user" in str(r.messages[0]["content"])
    ]
    assert len(extractions) == 2
    assert "Hamburg" in str(extractions[0].messages)
    assert "Oslo" not in str(extractions[0].messages)
    assert "Oslo" in str(extractions[1].messages)
    assert "Hamburg" not in str(extractions[1].messages)
