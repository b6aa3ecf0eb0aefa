"""The conversation's language, named in words in every instruction that writes text for
the user (title, follow-ups, updated title, summary) and in the main system prompt, and
kept by short messages (real stack, scripted model)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "お礼", "icon": "heart", "category": "general", "tags": []}'
POST = '{"follow_ups": ["他には"], "topic_changed": false, "summary": "お礼を言った。"}'
DRIFT = (
    '{"follow_ups": [], "topic_changed": true, "title": "天気の話", "summary": "天気の話をした。"}'
)


def _system(requests: list[Any], starts: str) -> list[str]:
    return [
        r.messages[0]["content"] for r in requests if r.messages[0]["content"].startswith(starts)
    ]


async def _send(client: Any, chat: Any, content: str) -> list[dict[str, Any]]:
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content=content)
    return await client.until("postprocess.done")


async def test_a_japanese_one_word_chat_gets_every_instruction_in_japanese(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="どういたしまして。", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)

    frames = await _send(client, chat, "ありがとう")

    languages = {f["language"] for f in frames if f["type"] == "preprocess.done"}
    assert languages == {"ja"}
    (title,) = _system(llm_script.requests, "Name this conversation")
    assert title.endswith("The conversation is in Japanese: write the title in Japanese.")
    (main,) = [r for r in llm_script.requests if r.model == "standard"]
    assert "(detected: Japanese)." in main.messages[0]["content"]
    (ask,) = _system(llm_script.requests, "After this conversation")
    assert ask.endswith(
        "The conversation is in Japanese: write the follow-ups, the title and the summary "
        "in Japanese."
    )

    # "ok" says no language: the chat's stays, and so does the updated title's.
    llm_script.requests.clear()
    llm_script.reply(text="はい。", model="fast")  # "ok" is a short message: fast tier
    llm_script.reply(text=DRIFT, model="fast")
    frames = await _send(client, chat, "ok")

    assert {f["language"] for f in frames if f["type"] == "preprocess.done"} == {"ja"}
    (ask,) = _system(llm_script.requests, "After this conversation")
    assert "write the follow-ups, the title and the summary in Japanese." in ask
    assert frames[-1]["title"] == "天気の話"


async def test_a_german_thank_you_is_german_not_the_instances_english(
    ws_client, chat, user, llm_script
):
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(
        text='{"title": "Dank", "icon": "heart", "category": "x", "tags": []}', model="fast"
    )
    llm_script.reply(text="Gern geschehen.", model="standard")
    llm_script.reply(
        text='{"follow_ups": [], "topic_changed": false, "summary": "Dank."}', model="fast"
    )
    client = await ws_client(user)

    frames = await _send(client, chat, "Danke")

    assert {f["language"] for f in frames if f["type"] == "preprocess.done"} == {"de"}
    (title,) = _system(llm_script.requests, "Name this conversation")
    assert title.endswith("write the title in German.")
    (ask,) = _system(llm_script.requests, "After this conversation")
    assert ask.endswith("write the follow-ups, the title and the summary in German.")
