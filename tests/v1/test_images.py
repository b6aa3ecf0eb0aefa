"""Image parts on /v1 (docs/api.md §3): with a tier that sees images the model gets each
as an ``image_url`` part, as a browser's attached image; without one, or given by a URL
to fetch, the request is refused 400 before anything is written. In-process (Django's
async test client), the models scripted at the LiteLLM boundary."""

from __future__ import annotations

import base64
import json
from typing import Any

import litellm
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from accounts.instance_keys import instance_key_create
from chats import cache as chat_cache
from chats.models import Chat
from pipeline.turn import instance_context_forget
from tests.file_samples import tiny_png

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("inprocess_turns"),
]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Square", "icon": "chat", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'
VISION_MODEL = "scripted/vision"
PNG_URL = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()


@pytest.fixture
def vision_standard(instance: Any) -> Any:
    """``instance`` whose standard and heavy tiers run a model that sees images and whose
    fast tier one that does not (so a member's turn with images must be ``standard``)."""
    litellm.register_model(
        {
            VISION_MODEL: {
                "supports_vision": True,
                "litellm_provider": "scripted",
                "mode": "chat",
                "max_input_tokens": 128_000,
                "max_tokens": 4096,
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
            }
        }
    )
    instance.tier_map = {
        "fast": [{"model": "scripted/fast"}],
        "standard": [{"model": VISION_MODEL}],
        "heavy": [{"model": VISION_MODEL}],
    }
    instance.save()
    instance_context_forget()
    return instance


async def _post(instance: Any, content: Any) -> Any:
    key = (await sync_to_async(instance_key_create)(instance=instance, name="k"))[1]
    body = {"model": "demo", "messages": [{"role": "user", "content": content}]}
    return await AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def _with_image(url: str) -> list[dict[str, Any]]:
    # "Hi" would be a short conversational message, which pre-processing sends to fast.
    return [
        {"type": "text", "text": "Hi"},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
    ]


async def test_a_vision_tier_gets_the_image_as_an_image_url_part(
    vision_standard: Any, llm_script: Any
) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="A pink square.", model="vision")
    llm_script.reply(text=POST, model="fast")

    response = await _post(vision_standard, _with_image(PNG_URL))

    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "A pink square."
    (main,) = [r for r in llm_script.requests if r.model == "vision"]
    # The text part names the image too, as for a browser's attachment (pipeline.files).
    assert main.messages[-1]["content"] == [
        {"type": "text", "text": "Hi\n\n[image: image-1.png]"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
    ]
    chat_id = response["OpenMates-Conversation-Id"]
    # Later turns' history has a placeholder, never the image's bytes.
    owner = await sync_to_async(lambda: Chat.objects.get(pk=chat_id).owner_id)()
    cached = await chat_cache.ai_history_read(user_id=owner, chat_id=chat_id)
    assert (cached.messages or [])[0]["content"] == "Hi\n\n[image: image-1.png]"
    assert PNG_URL.split(",")[1] not in json.dumps(cached.messages)


async def test_an_image_without_a_vision_tier_is_400_and_nothing_is_written(
    instance: Any, llm_script: Any
) -> None:
    response = await _post(instance, _with_image(PNG_URL))

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "image_not_supported",
        "messages.0.content",
    )
    assert "cannot see images" in error["message"]
    assert not await Chat.objects.filter(instance=instance).aexists()
    assert llm_script.requests == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("https://example.com/cat.png", "image_url_not_supported"),
        ("http://127.0.0.1/cat.png", "image_url_not_supported"),
        ("data:image/png;base64,AAAA", "invalid_image"),  # not a PNG's bytes
        ("data:image/png;base64,%%%", "invalid_image"),
        ("data:image/svg+xml;base64,PHN2Zy8+", "invalid_image"),
        ("data:text/plain;base64,aGk=", "invalid_image"),
    ],
)
async def test_an_image_to_fetch_or_that_is_not_one_is_refused(
    vision_standard: Any, llm_script: Any, url: str, code: str
) -> None:
    response = await _post(vision_standard, _with_image(url))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["param"] == "messages.0.content.1"
    assert not await Chat.objects.filter(instance=vision_standard).aexists()
    assert llm_script.requests == []


async def test_bytes_that_are_no_png_are_named_as_such(
    vision_standard: Any, llm_script: Any
) -> None:
    response = await _post(vision_standard, _with_image("data:image/png;base64,AAAA"))

    assert response.json()["error"]["message"] == "Image 1 is not a valid image/png image."


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("\u200b\u2060\ufeff", "is empty"),
        ("\u202e\u2066 \u2069", "is empty"),
        ("hi \x00 there", "NUL"),
    ],
)
async def test_a_message_that_shows_nothing_or_holds_nul_is_400(
    instance: Any, llm_script: Any, content: str, says: str
) -> None:
    response = await _post(instance, content)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "messages")
    assert says in error["message"]
    assert not await Chat.objects.filter(instance=instance).aexists()
