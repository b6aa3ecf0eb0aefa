"""An instance's own model keys reach the provider in every stage of a turn.

``openmates.llm`` imports no app, so the pipeline resolves the instance's secrets
(``instances.services.ainstance_tier_secrets_get``) and passes them to each call.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from instances.services import instance_secret_set
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Keys", "icon": "key", "category": "general", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": "s"}'


def _keyed_tiers(instance: Any) -> None:
    instance.tier_map = {
        "fast": [{"model": "scripted/fast", "secret": "FAST_KEY"}],
        "standard": [{"model": "scripted/standard", "secret": "MAIN_KEY"}],
    }
    instance.save(update_fields=["tier_map"])
    instance_secret_set(instance=instance, name="FAST_KEY", value="sk-fast-of-the-instance")
    instance_secret_set(instance=instance, name="MAIN_KEY", value="sk-main-of-the-instance")


async def test_every_stage_of_a_turn_sends_the_instances_own_keys(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    await sync_to_async(_keyed_tiers)(instance)
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Here is the answer.", model="standard")
    llm_script.reply(text=POST, model="fast")
    client = await ws_client(user)

    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="Which key is used?"
    )
    frames = await client.until("stream.done")
    await client.until("postprocess.done")

    assert frames[-1]["content"] == "Here is the answer."
    keys = sorted({(r.model, r.api_key) for r in llm_script.requests})
    assert keys == [
        ("fast", "sk-fast-of-the-instance"),
        ("standard", "sk-main-of-the-instance"),
    ]
    assert len(llm_script.requests) == 4
