"""A turn's delivery (pipeline.runtime.delivery): deltas numbered and coalesced, cut to the
frame limit, sent to local sockets and in batches to other processes' channels, snapshots
and resume (real Redis, Vault and channel layer)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline import events as ev
from pipeline import state
from pipeline.protocol import MAX_FRAME_BYTES
from pipeline.runtime import delivery as delivery_module
from pipeline.runtime.delivery import COALESCE_S, FANOUT_S, Delivery, snapshots_save
from tests.pipeline.runtime_support import (
    Recorder,
    Spawner,
    fresh_channel_layer,
    received,
    task_record,
)

pytestmark = pytest.mark.timeout(30)

LIMIT = ev.MAX_TEXT_CHARS_PER_FRAME
# Timers may fire up to the loop's clock resolution early.
TIMER_SLACK_S = 0.002
# Windows widened where a test checks that something waits: on a loaded machine a test
# can stall for longer than the real 30 and 50 ms between two of its lines.
WIDE_S = 0.3


@pytest.fixture
def spawn() -> Spawner:
    return Spawner()


@pytest.fixture
async def layer() -> AsyncIterator[Any]:
    async with fresh_channel_layer() as channel_layer:
        yield channel_layer


def _delivery(spawn: Spawner, user_id: int | str = "7") -> tuple[Delivery, Recorder]:
    delivery = Delivery(task_record(user_id=user_id), spawn)
    socket = Recorder()
    delivery.local.append(socket)
    return delivery, socket


def _deltas(frames: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(f["sequence"], f["delta"]) for f in frames if f["type"] == "stream.delta"]


def _status(delivery: Delivery, embed_id: str) -> ev.SkillStatus:
    return ev.SkillStatus(
        chat_id=delivery.chat_id,
        task_id=delivery.task_id,
        embed_id=embed_id,
        tool="calculator",
        status="processing",
    )


# --- numbering and coalescing ------------------------------------------------------------


def test_deltas_are_coalesced_for_30_ms_and_batches_for_50_ms() -> None:
    assert (COALESCE_S, FANOUT_S) == (0.030, 0.050)


async def test_the_first_text_goes_out_at_once_and_the_next_within_the_window_as_one_delta(
    spawn: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_module, "COALESCE_S", WIDE_S)
    delivery, socket = _delivery(spawn)
    await delivery.add_text("Hel")
    assert _deltas(socket.frames) == [(1, "Hel")]
    await delivery.add_text("lo")
    await delivery.add_text(" world")
    assert len(socket.frames) == 1  # held until the window ends

    await asyncio.sleep(WIDE_S * 1.5)
    await spawn.settle()

    assert _deltas(socket.frames) == [(1, "Hel"), (2, "lo world")]
    assert socket.times[1] - socket.times[0] >= WIDE_S - TIMER_SLACK_S
    assert (delivery.sequence, delivery.content, delivery.pending) == (2, "Hello world", [])
    assert delivery.snapshot_dirty


async def test_text_after_a_quiet_window_goes_out_at_once_and_empty_text_not_at_all(
    spawn: Spawner,
) -> None:
    delivery, socket = _delivery(spawn)
    await delivery.add_text("One.")
    await asyncio.sleep(COALESCE_S + 0.01)
    await delivery.add_text("")
    await delivery.add_text(" Two.")

    assert _deltas(socket.frames) == [(1, "One."), (2, " Two.")]
    assert delivery.flush_handle is None


async def test_a_frame_goes_out_after_the_pending_text_and_is_kept_for_followers(
    spawn: Spawner,
) -> None:
    delivery, socket = _delivery(spawn)
    await delivery.add_text("a")
    await delivery.add_text("b")
    await delivery.emit(_status(delivery, "e1"))
    await asyncio.sleep(COALESCE_S * 2)  # the pending text's timer finds nothing left
    await spawn.settle()

    assert [(f["type"], f.get("sequence")) for f in socket.frames] == [
        ("stream.delta", 1),
        ("stream.delta", 2),
        ("skill.status", None),
    ]
    assert delivery.lifecycle == [socket.frames[2]]


async def test_text_longer_than_a_frame_is_cut_into_numbered_deltas_within_the_limit(
    spawn: Spawner,
) -> None:
    delivery, socket = _delivery(spawn)
    # A control character is 6 bytes of JSON: the worst case for the frame size.
    text = "\x01" * (2 * LIMIT + 10)
    await delivery.add_text(text)

    assert [(seq, len(delta)) for seq, delta in _deltas(socket.frames)] == [
        (1, LIMIT),
        (2, LIMIT),
        (3, 10),
    ]
    sizes = [ev.frame_bytes(frame) for frame in socket.frames]
    assert max(sizes) <= MAX_FRAME_BYTES
    assert max(sizes) > MAX_FRAME_BYTES - 8 * 1024  # the limit is what bounds them
    assert "".join(delta for _, delta in _deltas(socket.frames)) == text == delivery.content


async def test_text_coalesced_past_the_frame_limit_is_cut_at_it(spawn: Spawner) -> None:
    delivery, socket = _delivery(spawn)
    await delivery.add_text("x")
    await delivery.add_text("y" * (LIMIT - 5))
    await delivery.add_text("z" * 20)
    await delivery.flush_text()

    assert _deltas(socket.frames) == [
        (1, "x"),
        (2, "y" * (LIMIT - 5) + "z" * 5),
        (3, "z" * 15),
    ]


async def test_stream_done_carries_the_last_delta_sequence_and_the_snapshot_its_outcome(
    spawn: Spawner, cache_user_id: int
) -> None:
    delivery, socket = _delivery(spawn, user_id=cache_user_id)
    await delivery.add_text("Forty")
    await delivery.add_text("-two")  # still pending when the turn ends
    done = await delivery.finish(
        ev.StreamDone(
            chat_id=delivery.chat_id,
            task_id=delivery.task_id,
            message_id=delivery.message_id,
            content="Forty-two",
            model="scripted/standard",
            usage={"prompt_tokens": 12, "completion_tokens": 3},
            status="done",
        )
    )
    try:
        assert done.sequence == 2
        assert socket.frames[-1] == done.to_frame()
        assert _deltas(socket.frames) == [(1, "Forty"), (2, "-two")]
        stored = await state.snapshot_load(user_id=cache_user_id, task_id=delivery.task_id)
        assert stored == state.Snapshot(
            chat_id=delivery.chat_id,
            message_id=delivery.message_id,
            sequence=2,
            content="Forty-two",
            status="done",
            model="scripted/standard",
            usage={"prompt_tokens": 12, "completion_tokens": 3},
        )
        assert not delivery.snapshot_dirty
    finally:
        await state.snapshot_drop(delivery.task_id)


async def test_a_snapshot_that_cannot_be_sealed_is_logged_and_nothing_raised(
    spawn: Spawner, caplog: pytest.LogCaptureFixture
) -> None:
    delivery, _ = _delivery(spawn, user_id="no-such-user-key")
    await delivery.add_text("Kept nowhere.")
    with caplog.at_level(logging.ERROR, logger="pipeline.runtime.delivery"):
        await snapshots_save([delivery])

    assert "1 turn snapshot(s) not saved" in caplog.text
    assert not delivery.snapshot_dirty
    assert await state.redis_client().exists(state._snapshot_key(delivery.task_id)) == 0


# --- subscribers -------------------------------------------------------------------------


async def test_each_remote_subscriber_gets_its_catch_up_then_one_batch_per_fanout_window(
    spawn: Spawner, layer: Any
) -> None:
    delivery, socket = _delivery(spawn)
    await delivery.emit(_status(delivery, "e0"))
    first, second = await layer.new_channel(), await layer.new_channel()
    catch_up = delivery.subscribe(remote=first, resume=False, history_pending=False)
    delivery.subscribe(remote=second, resume=False, history_pending=False)
    assert catch_up == delivery.lifecycle == [socket.frames[0]]
    for channel in (first, second):
        assert await received(layer, channel) == {
            "type": "turn.frames",
            "task_id": delivery.task_id,
            "frames": catch_up,
        }

    for n in range(1, 6):
        await delivery.emit(_status(delivery, f"e{n}"))
    assert len(socket.frames) == 6  # the local socket has them at once

    for channel in (first, second):
        batch = await received(layer, channel)
        assert batch["frames"] == socket.frames[1:]  # all five in one message
    await spawn.settle()
    assert delivery.remote == {first: [], second: []}
    assert delivery.fanout_handle is None


async def test_a_batch_waits_for_the_fanout_window(
    spawn: Spawner, layer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_module, "FANOUT_S", WIDE_S)
    delivery, _ = _delivery(spawn)
    channel = await layer.new_channel()
    assert delivery.subscribe(remote=channel, resume=False, history_pending=False) == []
    await spawn.settle()  # an empty catch-up sends nothing
    await delivery.emit(_status(delivery, "e1"))
    assert len(delivery.remote[channel]) == 1
    await asyncio.sleep(WIDE_S / 2)
    assert len(delivery.remote[channel]) == 1  # not sent yet

    batch = await received(layer, channel)
    assert [f["embed_id"] for f in batch["frames"]] == ["e1"]


async def test_a_follower_gets_the_frames_so_far_then_a_snapshot_of_the_numbered_text(
    spawn: Spawner,
) -> None:
    delivery, _ = _delivery(spawn)
    await delivery.emit(_status(delivery, "e1"))
    await delivery.add_text("Hello")
    await delivery.add_text(" there")  # pending: the next delta, not the snapshot
    follower = Recorder()
    catch_up = delivery.subscribe(local=follower, resume=False, history_pending=True)

    assert [f["type"] for f in catch_up] == ["skill.status", "stream.snapshot"]
    assert (catch_up[1]["sequence"], catch_up[1]["content"]) == (1, "Hello")
    assert follower in delivery.local
    await delivery.flush_text()
    assert _deltas(follower.frames) == [(2, " there")]


async def test_a_follower_of_a_turn_without_text_gets_no_snapshot(spawn: Spawner) -> None:
    delivery, _ = _delivery(spawn)
    await delivery.emit(_status(delivery, "e1"))
    catch_up = delivery.subscribe(local=Recorder(), resume=False, history_pending=False)
    assert [f["type"] for f in catch_up] == ["skill.status"]


async def test_a_resume_gets_the_snapshot_and_the_history_request_while_the_turn_waits(
    spawn: Spawner,
) -> None:
    delivery, _ = _delivery(spawn)
    asked = ev.RequestChatHistory(
        chat_id=delivery.chat_id, request_id="r1", reason="cache_miss", expected_messages=4
    )
    await delivery.emit(_status(delivery, "e1"))
    await delivery.emit(asked)
    waiting = delivery.subscribe(local=Recorder(), resume=True, history_pending=True)
    answered = delivery.subscribe(local=Recorder(), resume=True, history_pending=False)

    snapshot = {
        "type": "stream.snapshot",
        "chat_id": delivery.chat_id,
        "task_id": delivery.task_id,
        "message_id": delivery.message_id,
        "sequence": 0,
        "content": "",
    }
    assert waiting == [snapshot, asked.to_frame()]
    assert answered == [snapshot]


async def test_a_resume_after_the_stream_ended_gets_its_end_and_what_followed(
    spawn: Spawner, cache_user_id: int
) -> None:
    # A tab reloaded while the turn post-processes: without the stream.done it would show
    # the answer streaming for ever.
    delivery, _ = _delivery(spawn, user_id=cache_user_id)
    await delivery.add_text("Wombats.")
    done = await delivery.finish(
        ev.StreamDone(
            chat_id=delivery.chat_id,
            task_id=delivery.task_id,
            message_id=delivery.message_id,
            content="Wombats.",
            model="scripted/standard",
            usage={"prompt_tokens": 2, "completion_tokens": 1},
            status="done",
        )
    )
    try:
        resumed = delivery.subscribe(local=Recorder(), resume=True, history_pending=False)
        post = ev.PostprocessDone(
            chat_id=delivery.chat_id, task_id=delivery.task_id, follow_ups=(), memories_saved=0
        )
        await delivery.emit(post)
        later = delivery.subscribe(local=Recorder(), resume=True, history_pending=False)

        assert [f["type"] for f in resumed] == ["stream.snapshot", "stream.done"]
        assert resumed[0]["content"] == "Wombats."
        assert resumed[1] == done.to_frame()
        assert later[1:] == [done.to_frame(), post.to_frame()]
    finally:
        await state.snapshot_drop(delivery.task_id)


async def test_a_long_snapshot_goes_out_in_parts_within_the_frame_limit(spawn: Spawner) -> None:
    delivery, _ = _delivery(spawn)
    text = "é\x01" * LIMIT
    await delivery.add_text(text)
    parts = delivery.subscribe(local=Recorder(), resume=True, history_pending=False)

    assert [(f["part"], f["parts"], f["sequence"]) for f in parts] == [(1, 2, 2), (2, 2, 2)]
    assert all(ev.frame_bytes(f) <= MAX_FRAME_BYTES for f in parts)
    assert "".join(f["content"] for f in parts) == text


async def test_following_locally_sends_the_catch_up_before_any_live_frame(
    spawn: Spawner,
) -> None:
    delivery, _ = _delivery(spawn)
    await delivery.add_text("Hello")
    await delivery.add_text(" again")
    follower = Recorder()
    await asyncio.gather(
        delivery.follow(follower, resume=True, history_pending=False), delivery.flush_text()
    )
    await delivery.add_text(" and on")
    await delivery.flush_text()

    first = follower.frames[0]
    assert first["type"] == "stream.snapshot"
    later = [(seq, d) for seq, d in _deltas(follower.frames) if seq > first["sequence"]]
    assert [seq for seq, _ in later] == list(range(first["sequence"] + 1, 4))
    assert first["content"] + "".join(d for _, d in later) == "Hello again and on"


async def test_a_closed_socket_is_forgotten_locally_and_as_a_remote_subscriber(
    spawn: Spawner,
) -> None:
    delivery, socket = _delivery(spawn)
    delivery.subscribe(remote=socket.channel_name, resume=True, history_pending=False)
    delivery.unsubscribe(socket)
    await delivery.emit(_status(delivery, "e1"))

    assert (delivery.local, delivery.remote, socket.frames) == ([], {}, [])


async def test_closing_sends_the_pending_text_and_the_open_batch_at_once(
    spawn: Spawner, layer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_module, "COALESCE_S", 10.0)
    monkeypatch.setattr(delivery_module, "FANOUT_S", 10.0)
    delivery, socket = _delivery(spawn)
    channel = await layer.new_channel()
    delivery.subscribe(remote=channel, resume=False, history_pending=False)
    await spawn.settle()  # an empty catch-up sends nothing
    await delivery.add_text("a")
    await delivery.add_text("b")  # pending, its timer set
    await delivery.close()

    assert _deltas(socket.frames) == [(1, "a"), (2, "b")]
    batch = await received(layer, channel, wait_s=5.0)  # not the 10 s window
    assert _deltas(batch["frames"]) == [(1, "a"), (2, "b")]
    await spawn.settle()
    assert delivery.remote[channel] == []
    assert len(socket.frames) == 2
