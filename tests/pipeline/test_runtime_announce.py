"""When a turn is announced to its user's sockets (``turn.announce``): a running turn
after its first delta, so the group send does not compete with its start (real Redis and
channel layer; scripted turns, no model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest

from pipeline import events as ev
from pipeline import runtime, state
from pipeline.runtime.turn_registry import TurnControl, TurnRegistry
from tests.pipeline.runtime_support import (
    Recorder,
    forget_turn,
    fresh_channel_layer,
    received,
    task_record,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def registry() -> AsyncIterator[TurnRegistry]:
    async with fresh_channel_layer():
        started = runtime.registry("announce")
        await started.ensure_started()
        yield started
        await asyncio.wait_for(started.wait_idle(), 20)
        await asyncio.wait_for(started.stop(), 20)


def _done(record: state.TaskRecord) -> ev.StreamDone:
    return ev.StreamDone(
        chat_id=record.chat_id,
        task_id=record.task_id,
        message_id=record.assistant_message_id,
        content="Hi",
        model="scripted/standard",
        usage={"prompt_tokens": 1, "completion_tokens": 1},
        status="done",
    )


def _turn(
    record: state.TaskRecord, first: ev.ServerEvent, go: asyncio.Event, end: asyncio.Event
) -> Callable[[TurnControl], AsyncGenerator[ev.ServerEvent, None]]:
    async def turn(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        await go.wait()
        yield first
        await end.wait()
        yield _done(record)

    return turn


async def _listening(user_id: int) -> tuple[Any, str]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    listener = await layer.new_channel()
    await layer.group_add(runtime.user_group(user_id), listener)
    return layer, listener


@pytest.mark.parametrize(
    "first",
    [
        ev.ReplyDelta(text="Hi"),
        ev.RequestChatHistory(
            chat_id="c", request_id="r", reason="cache_miss", expected_messages=2
        ),
    ],
    ids=["first delta", "a history request"],
)
async def test_a_running_turn_is_announced_once_it_sends_its_first_delta_or_asks_the_user(
    registry: TurnRegistry, cache_user_id: int, first: ev.ServerEvent
) -> None:
    layer, listener = await _listening(cache_user_id)
    record = task_record(user_id=cache_user_id, owner=registry.channel)
    go, end, origin = asyncio.Event(), asyncio.Event(), Recorder()
    await registry.start(record=record, factory=_turn(record, first, go, end), origin=origin)
    await origin.until("message.accepted")
    with pytest.raises(TimeoutError):
        await received(layer, listener, wait_s=0.3)

    go.set()
    announced = await received(layer, listener)

    assert announced == {
        "type": "turn.announce",
        "task_id": record.task_id,
        "owner": registry.channel,
    }
    end.set()
    await registry.wait_idle()
    with pytest.raises(TimeoutError):  # once
        await received(layer, listener, wait_s=0.3)
    await layer.group_discard(runtime.user_group(cache_user_id), listener)
    await forget_turn(record)
