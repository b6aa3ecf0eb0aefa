"""/v1 driven by the official ``openai`` client against a live Daphne (loopback only):
answers, streaming, usage, stop, content parts, conversations continued by header,
the errors OpenAI clients expect, limits, keys kept apart, disconnects."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import openai
import pytest
from django.core.management import call_command

from accounts.instance_keys import instance_key_create
from accounts.models import InstanceApiKey
from accounts.services import api_token_create
from chats.models import Chat, ChatMode, Message
from chats.services import sealed_text_open
from instances.models import Instance
from instances.services import instance_create
from memories import selectors as memory_selectors
from memories.models import Memory
from openai_api import quotas
from tests.file_samples import tiny_png
from tests.ui.wire import Turn, UIModelServer

pytestmark = pytest.mark.django_db(transaction=True)

CONVERSATION = "OpenMates-Conversation-Id"
PNG_URL = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()


@pytest.fixture
def live_instance(owner: Any, skill_catalog: None) -> Instance:
    return instance_create(slug="live", name="Live", owner=owner)


def _client(base: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)


def _key(instance: Instance, name: str = "script") -> str:
    return instance_key_create(instance=instance, name=name)[1]


def _reply(chat_id: str) -> Message:
    return Message.objects.filter(chat_id=chat_id, role="assistant").order_by("-chat_version")[0]


def _text(message: Message) -> str:
    owner = Chat.objects.get(pk=message.chat_id).owner_id
    return sealed_text_open(
        owner_id=owner, object_id=message.pk, sealed=message.server_content or b""
    )


def test_models_and_a_non_streaming_answer(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    client = _client(v1_server, _key(live_instance))
    model_server.queue(Turn(pieces=["Bonjour", " à vous."], gap_s=0))

    models = [m.id for m in client.models.list()]
    raw = client.chat.completions.with_raw_response.create(
        model="live", messages=[{"role": "user", "content": "Say hello in French"}]
    )
    answer = raw.parse()

    assert models == ["live"]
    assert answer.choices[0].message.content == "Bonjour à vous."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2
    chat_id = raw.headers[CONVERSATION]
    chat = Chat.objects.get(pk=chat_id)
    assert chat.mode == ChatMode.SERVER_MANAGED
    assert chat.owner.username.startswith("apikey:")
    assert _text(_reply(chat_id)) == "Bonjour à vous."


def test_streaming_text_equals_the_stored_reply_and_usage_comes_last(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    client = _client(v1_server, _key(live_instance))
    model_server.queue(Turn(pieces=["One", " two", " three."], gap_s=0.01))

    raw = client.chat.completions.with_raw_response.create(
        model="live",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Count to three"}]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "One two three."
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 10
    assert all(c.usage is None for c in chunks[:-1])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert _text(_reply(raw.headers[CONVERSATION])) == text
    main = [r for r in model_server.requests if r.get("stream") and "Count to three" in str(r)]
    assert main, model_server.requests


def test_the_wire_ends_with_done_and_stop_reaches_the_model(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    key = _key(live_instance)
    body = {"model": "live", "stream": True, "stop": "END"}
    with httpx.stream(
        "POST",
        f"{v1_server}/v1/chat/completions",
        json={**body, "messages": [{"role": "user", "content": "Write a line"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        events = [line for line in response.iter_lines() if line]
    listed = _client(v1_server, key).chat.completions.create(
        model="live", messages=[{"role": "user", "content": "Again"}], stop=["A", "B"]
    )

    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    stops = [r.get("stop") for r in model_server.requests if r.get("stream")]
    assert ["END"] in stops
    assert ["A", "B"] in stops
    assert listed.choices[0].message.content == "Hello from the test model."


def _main_request(model_server: UIModelServer, marker: str) -> dict[str, Any]:
    """The main (streamed, no JSON schema) model request whose user message has ``marker``."""
    (request,) = [
        r
        for r in model_server.requests
        if r.get("stream")
        and not r.get("response_format")
        and marker in str(r["messages"][-1].get("content"))
    ]
    return request


def test_stop_as_a_string_temperature_and_max_tokens_reach_the_model(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    client = _client(v1_server, _key(live_instance))

    client.chat.completions.create(
        model="live",
        messages=[{"role": "user", "content": "Sampled kiwi"}],
        stop="END",
        temperature=0.25,
        max_tokens=42,
    )
    client.chat.completions.create(
        model="live", messages=[{"role": "user", "content": "Defaults mango"}]
    )

    sampled = _main_request(model_server, "kiwi")
    assert (sampled["stop"], sampled["temperature"], sampled["max_tokens"]) == (["END"], 0.25, 42)
    defaults = _main_request(model_server, "mango")
    assert not {"stop", "temperature", "max_tokens"} & set(defaults)


def test_models_with_a_users_own_token_are_the_instances_they_belong_to(
    v1_server: str, live_instance: Instance, owner: Any, stranger: Any
) -> None:
    instance_create(slug="second", name="Second", owner=owner)
    instance_create(slug="foreign", name="Foreign", owner=stranger)
    _, token = api_token_create(user=owner, name="mine")

    listed = _client(v1_server, token).models.list()

    assert [(m.id, m.object, m.owned_by) for m in listed] == [
        ("live", "model", "openmates"),
        ("second", "model", "openmates"),
    ]
    assert all(isinstance(m.created, int) and m.created > 0 for m in listed)


def test_a_conversation_is_continued_by_its_header(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    client = _client(v1_server, _key(live_instance))
    model_server.queue(Turn(pieces=["Noted: blue."], gap_s=0), Turn(pieces=["Blue."], gap_s=0))

    first = client.chat.completions.with_raw_response.create(
        model="live", messages=[{"role": "user", "content": "My colour is blue"}]
    )
    chat_id = first.headers[CONVERSATION]
    second = client.chat.completions.with_raw_response.create(
        model="live",
        messages=[{"role": "user", "content": "What is my colour?"}],
        extra_headers={CONVERSATION: chat_id},
    )

    assert second.headers[CONVERSATION] == chat_id
    assert second.parse().choices[0].message.content == "Blue."
    last = [r for r in model_server.requests if r.get("stream")][-1]
    contents = [m["content"] for m in last["messages"]]
    assert any("My colour is blue" in c for c in contents)
    assert any("Noted: blue." in c for c in contents)
    assert Message.objects.filter(chat_id=chat_id).count() == 4


def test_refusals_have_openai_shapes(v1_server: str, live_instance: Instance) -> None:
    client = _client(v1_server, _key(live_instance))
    hello: Any = [{"role": "user", "content": "Hello"}]

    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nope", messages=hello)
    with pytest.raises(openai.BadRequestError) as two:
        client.chat.completions.create(model="live", messages=hello, n=2)
    with pytest.raises(openai.BadRequestError) as tools:
        client.chat.completions.create(
            model="live",
            messages=hello,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    with pytest.raises(openai.BadRequestError) as image:
        client.chat.completions.create(
            model="live",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": PNG_URL}},
                    ],
                }
            ],
        )
    with pytest.raises(openai.AuthenticationError) as bad_key:
        _client(v1_server, "omk_000000000000_" + "x" * 43).models.list()
    as_string = httpx.post(
        f"{v1_server}/v1/chat/completions",
        json={"model": "live", "messages": hello, "temperature": "1"},
        headers={"Authorization": f"Bearer {_key(live_instance, 'typed')}"},
        timeout=30,
    )

    assert unknown.value.code == "model_not_found"
    assert (two.value.code, tools.value.code) == ("unsupported_value", "unsupported_parameter")
    assert image.value.code == "image_not_supported"
    assert bad_key.value.code == "invalid_api_key"
    assert as_string.status_code == 400
    assert as_string.json()["error"] == {
        "message": "temperature: Input should be a valid number",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "invalid_type",
    }
    assert not Chat.objects.filter(instance=live_instance).exists()


def test_over_the_request_limit_is_429_with_retry_after(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    Instance.objects.filter(pk=live_instance.pk).update(api_requests_per_minute=1)
    client = _client(v1_server, _key(live_instance))
    hello: Any = [{"role": "user", "content": "Hello"}]
    if time.time() % 60 > 50:  # both requests in one minute window
        time.sleep(61 - time.time() % 60)

    client.chat.completions.create(model="live", messages=hello)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="live", messages=hello)

    retry_after = int(limited.value.response.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    assert limited.value.code == "requests_per_minute"


def test_two_keys_of_one_instance_never_share_conversations(
    v1_server: str, model_server: UIModelServer, live_instance: Instance, owner: Any
) -> None:
    first, second = _key(live_instance, "a"), _key(live_instance, "b")
    _, token = api_token_create(user=owner, name="mine")

    made = _client(v1_server, first).chat.completions.with_raw_response.create(
        model="live", messages=[{"role": "user", "content": "Secret plan"}], user="second-key"
    )
    chat_id = made.headers[CONVERSATION]
    with pytest.raises(openai.NotFoundError) as other_key:
        _client(v1_server, second).chat.completions.create(
            model="live",
            messages=[{"role": "user", "content": "What was the plan?"}],
            extra_headers={CONVERSATION: chat_id},
        )
    with pytest.raises(openai.NotFoundError) as owner_token:
        _client(v1_server, token).chat.completions.create(
            model="live",
            messages=[{"role": "user", "content": "What was the plan?"}],
            extra_headers={CONVERSATION: chat_id},
        )
    own = _client(v1_server, token).chat.completions.with_raw_response.create(
        model="live", messages=[{"role": "user", "content": "Hi as me"}]
    )

    assert other_key.value.code == owner_token.value.code == "conversation_not_found"
    keys = {k.name: k.user_id for k in InstanceApiKey.objects.filter(instance=live_instance)}
    assert Chat.objects.get(pk=chat_id).owner_id == keys["a"] != keys["b"]
    assert Chat.objects.get(pk=own.headers[CONVERSATION]).owner_id == owner.pk
    assert Chat.objects.filter(owner_id=keys["b"]).count() == 0


TEA = "The user loves green tea."


def _main_prompt(model_server: UIModelServer, marker: str) -> str:
    """The system prompt of the main (streamed) model call whose user message has ``marker``."""
    return str(_main_request(model_server, marker)["messages"][0]["content"])


def _memories(instance: Instance, user_id: int) -> list[tuple[str, str]]:
    rows = list(memory_selectors.memories_for_user(instance_id=instance.pk, user_id=user_id))
    opened = memory_selectors.memories_open(rows, instance_id=instance.pk, user_id=user_id)
    return [(memory.category, text) for memory, text in opened]


def test_two_keys_of_one_instance_never_share_memories(
    v1_server: str, model_server: UIModelServer, live_instance: Instance, owner: Any
) -> None:
    first, second = _key(live_instance, "a"), _key(live_instance, "b")
    _, token = api_token_create(user=owner, name="mine")
    keys = {k.name: k.user_id for k in InstanceApiKey.objects.filter(instance=live_instance)}
    # Post-processing's extraction call (a JSON schema with "facts") remembers this.
    model_server.set_json(facts=[{"category": "preference", "content": TEA}])

    told = _client(v1_server, first).chat.completions.with_raw_response.create(
        model="live", messages=[{"role": "user", "content": "I love green tea."}]
    )
    deadline = time.monotonic() + 30
    while not _memories(live_instance, keys["a"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    saved = _memories(live_instance, keys["a"])
    model_server.set_json(facts=[])  # the later turns remember nothing
    for credential, who in ((first, "key A"), (second, "key B"), (token, "the owner")):
        _client(v1_server, credential).chat.completions.create(
            model="live",
            messages=[{"role": "user", "content": f"Can you recommend a tea? ({who})"}],
        )
    owner_list = httpx.get(
        f"{v1_server}/api/memories/live/", headers={"Authorization": f"Bearer {token}"}
    )
    key_list = httpx.get(
        f"{v1_server}/api/memories/live/", headers={"Authorization": f"Bearer {second}"}
    )

    assert saved == [("preference", TEA)]
    memory = Memory.objects.get(instance=live_instance)  # the only one, in any user's name
    assert (memory.user_id, memory.source_chat_id) == (keys["a"], told.headers[CONVERSATION])
    assert f"- {TEA}" in _main_prompt(model_server, "(key A)")
    assert TEA not in _main_prompt(model_server, "(key B)")
    assert TEA not in _main_prompt(model_server, "(the owner)")
    assert "What you remember about the user" not in _main_prompt(model_server, "(key B)")
    assert owner_list.status_code == 200
    assert owner_list.json()["results"] == []
    assert key_list.status_code == 401  # an instance key works on /v1 only
    assert _memories(live_instance, keys["b"]) == _memories(live_instance, owner.pk) == []


def test_a_client_that_disconnects_mid_stream_cancels_the_turn(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    key = _key(live_instance)
    model_server.queue(Turn(pieces=[f"word{i} " for i in range(100)], gap_s=0.1))

    with httpx.stream(
        "POST",
        f"{v1_server}/v1/chat/completions",
        json={"model": "live", "stream": True, "messages": [{"role": "user", "content": "Go"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        chat_id = response.headers[CONVERSATION]
        for line in response.iter_lines():
            if "word1" in line:
                break
    deadline = time.monotonic() + 20
    while _reply(chat_id).status == "pending" and time.monotonic() < deadline:
        time.sleep(0.1)

    assert _reply(chat_id).status == "cancelled"
    # Leaving early does not escape tokens_per_day: what it used is counted, estimated.
    prefix = InstanceApiKey.objects.get(instance=live_instance, name="script").prefix
    deadline = time.monotonic() + 10
    while f"key:{prefix}" not in quotas.tokens_today(instance_id=live_instance.pk):
        assert time.monotonic() < deadline, "the left stream's tokens were not counted"
        time.sleep(0.1)
    # "Go" and at least "word0 " streamed: (2 + 6) / 4 characters per token.
    assert quotas.tokens_today(instance_id=live_instance.pk)[f"key:{prefix}"] >= 2


def test_create_api_key_for_an_instance_prints_a_key_that_works(
    v1_server: str, live_instance: Instance, capsys: Any
) -> None:
    call_command("create_api_key", instance="live", name="cli", expires_days=3)
    raw = capsys.readouterr().out.strip()
    models = [m.id for m in _client(v1_server, raw).models.list()]
    call_command("revoke_api_key", raw)

    assert raw.startswith("omk_")
    assert models == ["live"]
    with pytest.raises(openai.AuthenticationError):
        _client(v1_server, raw).models.list()


def _follow_up_calls(model_server: UIModelServer, marker: str) -> int:
    return sum(
        1
        for r in model_server.requests
        if "follow_ups" in str(r.get("response_format")) and marker in str(r.get("messages"))
    )


def test_a_task_request_skips_post_processing(
    v1_server: str, model_server: UIModelServer, live_instance: Instance
) -> None:
    client = _client(v1_server, _key(live_instance))

    client.chat.completions.create(
        model="live", messages=[{"role": "user", "content": "Plain question zebra"}]
    )
    client.chat.completions.create(
        model="live", messages=[{"role": "user", "content": "### Task: title for giraffe"}]
    )
    deadline = time.monotonic() + 10
    while _follow_up_calls(model_server, "zebra") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # the task turn's post-processing would have started by now

    assert _follow_up_calls(model_server, "zebra") == 1
    assert _follow_up_calls(model_server, "giraffe") == 0
