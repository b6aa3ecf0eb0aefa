"""The turn registry (pipeline.runtime.turn_registry): turns in the background with the
chat's lease or a place in its queue, the hand-off between them, following a turn of
another process, cancel and the control channel (real Redis and channel layer; the turns
are scripted event generators, no model)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest

from chats import cache as chat_cache
from pipeline import events as ev
from pipeline import runtime, state
from pipeline.runtime import reaper
from pipeline.runtime.turn_registry import TurnControl, TurnRegistry
from tests.pipeline.runtime_support import (
    Recorder,
    eventually,
    forget_turn,
    fresh_channel_layer,
    received,
    task_record,
)

pytestmark = pytest.mark.timeout(30)

Turn = Callable[[TurnControl], AsyncGenerator[ev.ServerEvent, None]]


@pytest.fixture
async def layer() -> AsyncIterator[Any]:
    async with fresh_channel_layer() as channel_layer:
        yield channel_layer


@pytest.fixture
async def registries(layer: Any) -> AsyncIterator[Callable[[str], Any]]:
    """``await registries(name)`` → a started registry (a "process"), stopped afterwards."""
    used: list[TurnRegistry] = []

    async def started(name: str = "default") -> TurnRegistry:
        registry = runtime.registry(name)
        await registry.ensure_started()
        used.append(registry)
        return registry

    yield started
    for registry in used:
        await asyncio.wait_for(registry.wait_idle(), 20)
        await asyncio.wait_for(registry.stop(), 20)


async def _record(registry: TurnRegistry, user_id: int, chat_id: str = "") -> state.TaskRecord:
    return task_record(user_id=user_id, chat_id=chat_id, owner=registry.channel)


def _done(record: state.TaskRecord, status: str = "done", content: str = "") -> ev.StreamDone:
    return ev.StreamDone(
        chat_id=record.chat_id,
        task_id=record.task_id,
        message_id=record.assistant_message_id,
        content=content,
        model="scripted/standard",
        usage={"prompt_tokens": 1, "completion_tokens": 1},
        status=status,
    )


def _gated(
    record: state.TaskRecord, answer: asyncio.Event, post: asyncio.Event | None = None
) -> Turn:
    """A turn that says "Hi", waits for ``answer``, ends, then waits for ``post``
    (its post-processing); it ends ``cancelled`` when cancelled meanwhile."""

    async def turn(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        if not control.cancel.is_set():
            yield ev.ReplyDelta(text="Hi")
            # A cancel of the task lands here; like run_turn, the turn reads the flag.
            with contextlib.suppress(asyncio.CancelledError):
                await answer.wait()
        status = "cancelled" if control.cancel.is_set() else "done"
        yield _done(record, status)
        if post is not None:
            await post.wait()

    return turn


async def _queue(chat_id: str) -> list[str]:
    waiting = await state.redis_client().lrange(state._queue_key(chat_id), 0, -1)
    return [state._str(task_id) for task_id in waiting]


async def test_a_turn_runs_in_the_background_holding_the_lease_then_leaves_nothing(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    answer, socket = asyncio.Event(), Recorder()
    turn = await registry.start(record=record, factory=_gated(record, answer), origin=socket)
    await socket.until("stream.delta")

    assert await state.record_get(record.task_id) == dataclasses.replace(record, state="running")
    assert await state.lease_holder(record.chat_id) == record.task_id
    assert registry.turns == {record.task_id: turn}
    assert (turn.lease_held, turn.sequence) == (True, 1)
    answer.set()
    await registry.wait_idle()

    assert socket.types() == ["message.accepted", "stream.delta", "stream.done"]
    assert socket.frames[-1]["sequence"] == 1
    assert await state.record_get(record.task_id) is None
    assert await state.lease_holder(record.chat_id) is None
    assert record.task_id not in await state.running_task_ids()
    assert registry.turns == {}
    await state.snapshot_drop(record.task_id)


async def test_a_second_turn_queues_and_gets_the_lease_at_the_first_ones_stream_done(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    first = await _record(registry, cache_user_id)
    second = await _record(registry, cache_user_id, chat_id=first.chat_id)
    answer, post = asyncio.Event(), asyncio.Event()
    first_socket, second_socket = Recorder(), Recorder()
    await registry.start(record=first, factory=_gated(first, answer, post), origin=first_socket)
    await first_socket.until("stream.delta")
    await registry.start(
        record=second, factory=_gated(second, asyncio.Event()), origin=second_socket
    )
    queued = await second_socket.until("task.queued")

    assert (queued["position"], queued["task_id"]) == (1, second.task_id)
    assert (await state.record_get(second.task_id)) == second  # state queued
    assert await _queue(first.chat_id) == [second.task_id]
    answer.set()  # the first turn ends; its post-processing (post) still runs
    await second_socket.until("message.accepted")

    assert first.task_id in registry.turns
    assert await state.lease_holder(first.chat_id) == second.task_id
    record = await state.record_get(second.task_id)
    assert record is not None
    assert record.state == "running"
    assert await _queue(first.chat_id) == []
    assert registry.cancel(second.task_id)
    post.set()
    await registry.wait_idle()
    assert second_socket.types()[-2:] == ["stream.done", "task.cancelled"]
    await forget_turn(first)
    await forget_turn(second)


async def test_a_turn_cancelled_while_queued_leaves_the_queue_and_never_holds_the_lease(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    first = await _record(registry, cache_user_id)
    second = await _record(registry, cache_user_id, chat_id=first.chat_id)
    answer, first_socket = asyncio.Event(), Recorder()
    await registry.start(record=first, factory=_gated(first, answer), origin=first_socket)
    await first_socket.until("stream.delta")
    socket = Recorder()
    turn = await registry.start(
        record=second, factory=_gated(second, asyncio.Event()), origin=socket
    )
    await socket.until("task.queued")

    assert registry.cancel(second.task_id)
    await socket.until("task.cancelled")

    assert socket.types() == ["task.queued", "message.accepted", "stream.done", "task.cancelled"]
    assert socket.frames[2]["status"] == "cancelled"
    assert not turn.lease_held
    await eventually(lambda: second.task_id not in registry.turns)
    assert await _queue(first.chat_id) == []
    assert await state.lease_holder(first.chat_id) == first.task_id
    answer.set()
    await registry.wait_idle()
    await forget_turn(first)
    await forget_turn(second)


async def test_cancel_stops_a_running_turn_once_and_not_one_that_is_finishing(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    post = asyncio.Event()
    socket = Recorder()
    turn = await registry.start(
        record=record, factory=_gated(record, asyncio.Event(), post), origin=socket
    )
    await socket.until("stream.delta")

    assert registry.cancel("no-such-task") is False
    assert registry.cancel(record.task_id) is True
    await socket.until("task.cancelled")
    assert socket.frames[-2]["status"] == "cancelled"
    assert turn.finishing
    assert registry.cancel(record.task_id) is True  # already cancelled: nothing more
    assert socket.types().count("task.cancelled") == 1
    post.set()
    await registry.wait_idle()
    assert registry.cancel(record.task_id) is False
    await forget_turn(record)


async def test_a_cancel_after_stream_done_is_too_late(registries: Any, cache_user_id: int) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    answer, post, socket = asyncio.Event(), asyncio.Event(), Recorder()
    turn = await registry.start(record=record, factory=_gated(record, answer, post), origin=socket)
    answer.set()
    await socket.until("stream.done")

    assert registry.cancel(record.task_id) is True
    assert not turn.control.cancel.is_set()
    post.set()
    await registry.wait_idle()
    assert socket.frames[-1]["status"] == "done"
    await forget_turn(record)


async def test_a_new_turn_is_announced_to_the_users_sockets(
    registries: Any, layer: Any, cache_user_id: int
) -> None:
    registry = await registries()
    listener = await layer.new_channel()
    await layer.group_add(runtime.user_group(cache_user_id), listener)
    record = await _record(registry, cache_user_id)
    answer = asyncio.Event()
    await registry.start(record=record, factory=_gated(record, answer), origin=None)

    assert await received(layer, listener) == {
        "type": "turn.announce",
        "task_id": record.task_id,
        "owner": registry.channel,
    }
    answer.set()
    await registry.wait_idle()
    await layer.group_discard(runtime.user_group(cache_user_id), listener)
    await forget_turn(record)


async def test_a_socket_of_another_process_follows_through_the_owners_control_channel(
    registries: Any, layer: Any, cache_user_id: int
) -> None:
    owner, other = await registries("a"), await registries("b")
    assert owner.channel != other.channel
    record = await _record(owner, cache_user_id)
    answer, origin = asyncio.Event(), Recorder()
    await owner.start(record=record, factory=_gated(record, answer), origin=origin)
    await origin.until("stream.delta")
    follower = Recorder(await layer.new_channel())

    assert await other.subscribe_anywhere(record, follower, resume=False)
    catch_up = (await received(layer, follower.channel_name))["frames"]
    assert [f["type"] for f in catch_up] == ["message.accepted", "stream.snapshot"]
    assert (catch_up[1]["sequence"], catch_up[1]["content"]) == (1, "Hi")
    answer.set()
    live = (await received(layer, follower.channel_name))["frames"]
    assert [(f["type"], f["sequence"]) for f in live] == [("stream.done", 1)]
    await owner.wait_idle()
    await forget_turn(record)


async def test_following_a_turn_that_just_ended_answers_turn_ended(
    registries: Any, layer: Any
) -> None:
    owner, other = await registries("a"), await registries("b")
    record = await _record(owner, 7)  # never started: as good as ended
    follower = Recorder(await layer.new_channel())

    assert await other.subscribe_anywhere(record, follower, resume=True)
    assert await received(layer, follower.channel_name) == {
        "type": "turn.ended",
        "task_id": record.task_id,
    }
    assert await owner.subscribe_anywhere(record, follower, resume=True) is False


async def test_a_local_follower_gets_its_catch_up_directly(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    answer, origin, follower = asyncio.Event(), Recorder(), Recorder()
    await registry.start(record=record, factory=_gated(record, answer), origin=origin)
    await origin.until("stream.delta")

    assert await registry.subscribe_anywhere(record, follower, resume=True)
    assert follower.types() == ["stream.snapshot"]
    registry.unsubscribe(origin)
    answer.set()
    await registry.wait_idle()
    assert follower.types() == ["stream.snapshot", "stream.done"]
    assert origin.types() == ["message.accepted", "stream.delta"]  # it closed
    await forget_turn(record)


async def test_the_history_and_a_tool_cancel_reach_a_turn_through_its_control_channel(
    registries: Any, layer: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    tool: list[asyncio.Task[None]] = []

    async def turn(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        tool.append(asyncio.create_task(asyncio.sleep(10)))
        control.tool_tasks["embed-1"] = tool[0]
        await control.history.wait()
        with pytest.raises(asyncio.CancelledError):
            await tool[0]
        yield _done(record, content=",".join(sorted(control.cancelled_tools)))

    socket = Recorder()
    active = await registry.start(record=record, factory=turn, origin=socket)
    await eventually(lambda: "embed-1" in active.control.tool_tasks)
    await layer.send(registry.channel, {"type": "skill.cancel", "embed_id": "embed-1"})
    await layer.send(registry.channel, {"type": "turn.history", "task_id": record.task_id})
    done = await socket.until("stream.done")

    assert done["content"] == "embed-1"
    await registry.wait_idle()  # stream.done reaches the socket before the turn unregisters
    assert registry.history_arrived(record.task_id) is False  # the turn has ended
    assert registry.cancel_tool("embed-1") is False
    await forget_turn(record)


@pytest.mark.django_db(transaction=True)
async def test_a_turn_that_crashes_outside_run_turn_ends_failed_with_an_error(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    failed: list[state.TaskRecord] = []

    async def broken(control: TurnControl) -> AsyncGenerator[ev.ServerEvent, None]:
        yield ev.ReplyDelta(text="Half")
        raise RuntimeError("Redis went away")

    async def remember(orphan: state.TaskRecord) -> None:
        failed.append(orphan)

    reaper.on_orphan(remember)
    try:
        socket = Recorder()
        await registry.start(record=record, factory=broken, origin=socket)
        await registry.wait_idle()
    finally:
        reaper._orphan_handlers.remove(remember)

    assert socket.types() == ["message.accepted", "stream.delta", "error", "stream.done"]
    assert socket.frames[2]["code"] == "internal"
    done = socket.frames[3]
    assert (done["status"], done["content"], done["sequence"]) == ("failed", "Half", 1)
    assert [r.task_id for r in failed] == [record.task_id]
    assert await state.record_get(record.task_id) is None
    assert await state.lease_holder(record.chat_id) is None
    # A socket resuming it later reads that it failed (actions.turn_ended).
    kept = await state.snapshot_load(user_id=cache_user_id, task_id=record.task_id)
    assert kept is not None
    assert (kept.status, kept.sequence, kept.content) == ("failed", 1, "Half")
    await state.snapshot_drop(record.task_id)


async def test_a_turn_of_a_chat_deleted_meanwhile_leaves_no_snapshot_nor_kept_text(
    registries: Any, cache_user_id: int
) -> None:
    registry = await registries()
    record = await _record(registry, cache_user_id)
    await state.pending_content_save(
        user_id=cache_user_id, message_id=record.message_id, content="Secret question"
    )
    answer, socket = asyncio.Event(), Recorder()
    await registry.start(record=record, factory=_gated(record, answer), origin=socket)
    await socket.until("stream.delta")
    await state.snapshots_save(
        [(cache_user_id, record.task_id, state.Snapshot(record.chat_id, "m", 1, "Hi", None))]
    )
    await chat_cache.achat_forget(user_id=cache_user_id, chat_id=record.chat_id)
    answer.set()
    await registry.wait_idle()

    assert socket.types()[-1] == "stream.done"
    client = state.redis_client()
    assert await client.exists(state._snapshot_key(record.task_id)) == 0
    assert (
        await state.pending_content_load(user_id=cache_user_id, message_id=record.message_id)
        is None
    )


async def test_the_registry_opens_one_control_channel_and_closes_it_on_stop(layer: Any) -> None:
    registry = TurnRegistry()
    channel = await registry.ensure_started()
    try:
        assert channel.startswith("specific.")
        assert await registry.ensure_started() == channel
        assert runtime.registry("x") is runtime.registry("x")
        assert runtime.registry("x") is not runtime.registry("y")
    finally:
        await registry.stop()
    assert registry.channel == ""
