"""Slack through the Events API, against the loopback Web API: signature and timestamp
window, the challenge, answers in thread, redelivery, people and threads apart."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import AsyncClient
from slack_sdk.signature import SignatureVerifier

from instances.models import ChannelConfig
from messaging.manager import ChannelManager
from messaging.models import ChannelConversation, ChannelIdentity
from tests.messaging.conftest import SLACK_SECRET, LeadGate, script_turn
from tests.messaging.platform import SLACK_BOT_USER, PlatformServer

pytestmark = pytest.mark.django_db(transaction=True)


def _event(event_id: str, text: str, *, user: str = "U1", thread_ts: str | None = None,
           kind: str = "app_mention", ts: str = "1700000000.000100",
           channel: str = "C1") -> dict[str, Any]:  # fmt: skip
    event: dict[str, Any] = {"type": kind, "user": user, "text": text, "channel": channel,
                             "ts": ts}  # fmt: skip
    if kind == "message":
        event["channel_type"] = "im"
    if thread_ts:
        event["thread_ts"] = thread_ts
    return {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}


async def _post(
    config: ChannelConfig, payload: Any, *, secret: str = SLACK_SECRET, age_s: int = 0
) -> Any:
    body = json.dumps(payload)
    timestamp = str(int(time.time()) - age_s)
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return await AsyncClient().post(
        f"/channels/slack/{config.pk}/",
        data=body,
        content_type="application/json",
        headers={"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature or ""},
    )


async def test_a_mention_runs_a_turn_answered_in_its_thread(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    script_turn(llm_script, "Here is **the** answer & more.")

    started = time.monotonic()
    response = await _post(slack_channel, _event("Ev1", f"<@{SLACK_BOT_USER}> help me"))
    acknowledged_s = time.monotonic() - started
    await manager.adapters[slack_channel.pk].desk.idle()

    assert response.status_code == 200
    assert acknowledged_s < 3
    posted = platform.of("chat.postMessage")
    assert [(c.params["channel"], c.params["thread_ts"]) for c in posted] == [
        ("C1", "1700000000.000100")
    ]
    assert posted[0].params["blocks"] == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Here is *the* answer &amp; more."}}
    ]
    assert [c.params["name"] for c in platform.of("reactions.add")] == ["hourglass_flowing_sand"]
    assert len(platform.of("reactions.remove")) == 1
    main = next(r for r in llm_script.requests if r.model == "standard")
    assert main.messages[-1]["content"] == "help me"
    identity = await ChannelIdentity.objects.aget()
    assert (identity.kind, identity.platform_user_id) == ("slack", "T1:U1")


async def test_bad_signature_or_old_timestamp_is_403_and_no_turn(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()

    bad = await _post(slack_channel, _event("Ev2", "hi"), secret="another-secret")
    old = await _post(slack_channel, _event("Ev3", "hi"), age_s=6 * 60)
    unsigned = await AsyncClient().post(
        f"/channels/slack/{slack_channel.pk}/", data=json.dumps(_event("Ev4", "hi")),
        content_type="application/json",
    )  # fmt: skip
    await manager.adapters[slack_channel.pk].desk.idle()

    assert (bad.status_code, old.status_code, unsigned.status_code) == (403, 403, 403)
    assert llm_script.requests == []
    assert platform.of("chat.postMessage") == []


async def test_the_url_check_gets_its_challenge_back(
    platform: PlatformServer, manager: ChannelManager, slack_channel: ChannelConfig
) -> None:
    await manager.reconcile()

    response = await _post(slack_channel, {"type": "url_verification", "challenge": "c-123"})

    assert response.status_code == 200
    assert json.loads(response.content) == {"challenge": "c-123"}


async def test_a_redelivered_event_is_one_turn_and_channel_threads_are_conversations(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[slack_channel.pk]
    script_turn(llm_script, "First thread.")
    await _post(slack_channel, _event("Ev5", "Please explain how tides work", ts="1.1"))
    await _post(slack_channel, _event("Ev5", "Please explain how tides work", ts="1.1"))  # retry
    await adapter.desk.idle()
    script_turn(llm_script, "Second thread.")
    await _post(slack_channel, _event("Ev6", "Please explain how rainbows form", ts="2.2"))
    await adapter.desk.idle()
    script_turn(llm_script, "Other person.")
    await _post(
        slack_channel, _event("Ev7", "Please explain why the sky is blue", user="U2", ts="3.3")
    )
    await adapter.desk.idle()

    assert adapter.desk.turns_started == 3
    assert [c.params["thread_ts"] for c in platform.of("chat.postMessage")] == [
        "1.1",
        "2.2",
        "3.3",
    ]
    keys = [(c.identity.platform_user_id, c.chat_key) async for c in
            ChannelConversation.objects.select_related("identity").order_by("pk")]  # fmt: skip
    assert keys == [("T1:U1", "C1:1.1"), ("T1:U1", "C1:2.2"), ("T1:U2", "C1:3.3")]
    chats = {c.chat_id async for c in ChannelConversation.objects.all()}
    assert len(chats) == 3


async def test_channel_messages_without_a_mention_and_bot_messages_are_ignored(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    plain = _event("Ev8", "talking among ourselves", kind="message")
    plain["event"]["channel_type"] = "channel"
    from_bot = _event("Ev9", f"<@{SLACK_BOT_USER}> hi")
    from_bot["event"]["bot_id"] = "B1"

    responses = [await _post(slack_channel, plain), await _post(slack_channel, from_bot)]
    await manager.adapters[slack_channel.pk].desk.idle()

    assert [r.status_code for r in responses] == [200, 200]
    assert llm_script.requests == []
    assert not await ChannelIdentity.objects.aexists()


def _main_texts(llm_script: Any) -> list[str]:
    return [r.messages[-1]["content"] for r in llm_script.requests if r.model == "standard"]


async def test_a_burst_of_direct_messages_is_one_turn_in_the_dms_one_conversation(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[slack_channel.pk]
    gate = LeadGate(adapter.desk, monkeypatch)  # both are waiting when the leader looks
    script_turn(llm_script, "One answer.")

    await _post(slack_channel, _event("Ev20", "hi", kind="message", channel="D1", ts="1.1"))
    await _post(
        slack_channel, _event("Ev21", "how are tides made?", kind="message", channel="D1", ts="1.2")
    )
    gate.open()
    await adapter.desk.idle()
    script_turn(llm_script, "Later answer.", first=False)
    await _post(slack_channel, _event("Ev22", "and waves?", kind="message", channel="D1", ts="9.9"))
    await adapter.desk.idle()

    assert _main_texts(llm_script) == ["hi\n\nhow are tides made?", "and waves?"]
    assert adapter.desk.turns_started == 2
    posted = platform.of("chat.postMessage")
    # Answered in the DM itself, not in a thread.
    assert [(c.params["channel"], c.params.get("thread_ts"), c.params["text"]) for c in posted] == [
        ("D1", None, "One answer."),
        ("D1", None, "Later answer."),
    ]
    keys = [c.chat_key async for c in ChannelConversation.objects.all()]
    assert keys == ["D1:"]
    # The later turn continued the DM's conversation: the model saw the first exchange.
    later = [r for r in llm_script.requests if r.model == "standard"][-1]
    assert "One answer." in str(later.messages)


async def test_a_thread_in_a_dm_is_a_conversation_of_its_own_answered_in_it(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[slack_channel.pk]
    script_turn(llm_script, "In the DM.")
    await _post(
        slack_channel,
        _event("Ev30", "Please explain how tides work", kind="message", channel="D1", ts="1.1"),
    )
    await adapter.desk.idle()
    script_turn(llm_script, "In the thread.")

    await _post(
        slack_channel,
        _event(
            "Ev31",
            "Please explain how rainbows form",
            kind="message",
            channel="D1",
            ts="2.5",
            thread_ts="2.2",
        ),
    )
    await adapter.desk.idle()

    posted = platform.of("chat.postMessage")
    assert [(c.params.get("thread_ts"), c.params["text"]) for c in posted] == [
        (None, "In the DM."),
        ("2.2", "In the thread."),
    ]
    keys = [c.chat_key async for c in ChannelConversation.objects.order_by("pk")]
    assert keys == ["D1:", "D1:2.2"]


async def test_one_persons_burst_of_channel_mentions_is_one_turn_in_the_first_ones_thread(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await manager.reconcile()
    adapter = manager.adapters[slack_channel.pk]
    gate = LeadGate(adapter.desk, monkeypatch)
    script_turn(llm_script, "Noted.")
    script_turn(llm_script, "Noted.")
    bot = f"<@{SLACK_BOT_USER}>"

    await _post(slack_channel, _event("Ev40", f"{bot} one question", ts="5.1"))
    await _post(slack_channel, _event("Ev41", f"{bot} and its detail", ts="5.2"))
    await _post(slack_channel, _event("Ev42", f"{bot} mine", user="U2", ts="5.3"))
    gate.open()
    await adapter.desk.idle()

    assert sorted(_main_texts(llm_script)) == ["mine", "one question\n\nand its detail"]
    threads = sorted(c.params["thread_ts"] for c in platform.of("chat.postMessage"))
    assert threads == ["5.1", "5.3"]
    keys = sorted([c.chat_key async for c in ChannelConversation.objects.all()])
    assert keys == ["C1:5.1", "C1:5.3"]


async def test_only_the_apps_own_mention_is_removed(
    platform: PlatformServer,
    manager: ChannelManager,
    slack_channel: ChannelConfig,
    llm_script: Any,
) -> None:
    await manager.reconcile()
    script_turn(llm_script, "Sure.")

    await _post(
        slack_channel,
        _event("Ev50", f"<@{SLACK_BOT_USER}> ask <@U2> and <@U3|carla> about it"),
    )
    await manager.adapters[slack_channel.pk].desk.idle()

    assert _main_texts(llm_script) == ["ask <@U2> and <@U3|carla> about it"]
