"""Long replies: every server frame within the protocol's limit, and the reply storable.

A scripted model streams ~400 kB; the client side measures each frame it receives, stores
the reply's ciphertext with ``message.store`` (a bulk frame) and the server copy goes.
The reply cap (``PIPELINE_MAX_REPLY_BYTES``) ends a longer reply with
``finish_reason: "length"``.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats.models import Message
from chats.services import sealed_text_open
from pipeline import events as ev
from pipeline import protocol
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "A long story", "icon": "book", "category": "writing", "tags": ["story"]}'
POST = '{"follow_ups": ["Shorter?"], "topic_changed": false, "summary": "A long story."}'
# ~400 kB with multi-byte characters, quotes and newlines (escaped in JSON); one piece of
# 300 kB arrives at once, more than one frame can carry.
LINE = 'Once upon a time "née" — the end…\n'
PIECES = ["Intro. ", LINE * 8600, *[LINE * 30 for _ in range(100)]]
REPLY = "".join(PIECES)


def _envelope_of(plaintext_bytes: int) -> str:
    """A docs/crypto.md §3 envelope (random bytes) as long as one of ``plaintext_bytes``."""
    return base64.b64encode(b"\x01" + os.urandom(8 + 12 + plaintext_bytes + 16)).decode()


async def _raw_until(client: Any, kind: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Frames up to the first of ``kind``, each one's size in bytes added to ``sizes``."""
    frames = []
    while True:
        text = await client.communicator.receive_from(timeout=30)
        sizes.append(len(text.encode("utf-8")))
        frame = json.loads(text)
        frames.append(frame)
        if frame["type"] == kind:
            return frames


def _first_message_script(llm_script: Any, **main: Any) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(model="standard", **main)
    llm_script.reply(text=POST, model="fast")


async def _row(message_id: str) -> Message:
    return await sync_to_async(Message.objects.get)(pk=message_id)


async def test_a_400_kb_reply_streams_in_frames_under_256_kib_and_is_stored_by_the_client(
    ws_client, chat, user, llm_script
):
    assert len(REPLY.encode("utf-8")) > 400_000
    _first_message_script(llm_script, text=PIECES)
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="A long story"
    )
    sizes: list[int] = []
    frames = await _raw_until(client, "postprocess.done", sizes)
    assert max(sizes) <= protocol.MAX_FRAME_BYTES
    deltas = [f for f in frames if f["type"] == "stream.delta"]
    assert [d["sequence"] for d in deltas] == list(range(1, len(deltas) + 1))
    assert "".join(d["delta"] for d in deltas) == REPLY
    (done,) = [f for f in frames if f["type"] == "stream.done"]
    assert done["status"] == "done"
    assert done["content_omitted"] is True
    assert "content" not in done
    assert done["sequence"] == deltas[-1]["sequence"]
    assert "finish_reason" not in done
    reply_id = done["message_id"]
    row = await _row(reply_id)
    kept = sealed_text_open(owner_id=user.pk, object_id=reply_id, sealed=row.server_content or b"")
    assert kept == REPLY

    # The browser encrypts the text it assembled and stores it: a bulk frame.
    ciphertext = _envelope_of(len(REPLY.encode("utf-8")))
    assert len(ciphertext) == protocol.ciphertext_chars(len(REPLY.encode("utf-8")))
    store = json.dumps(
        {
            "type": "message.store",
            "chat_id": chat.pk,
            "message_id": reply_id,
            "encrypted_content": ciphertext,
            "version": 0,
        }
    )
    assert len(store) > protocol.MAX_FRAME_BYTES
    await client.send_text(store)
    stored = await client.until("message.stored")
    assert stored[-1]["message_id"] == reply_id
    assert stored[-1]["version"] == 1
    row = await _row(reply_id)
    assert row.encrypted_content == ciphertext
    assert row.server_content is None


async def test_resuming_an_ended_long_reply_gets_its_snapshot_in_parts_under_256_kib(
    ws_client, chat, user, llm_script
):
    _first_message_script(llm_script, text=PIECES)
    client = await ws_client(user)
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="A long story"
    )
    done = (await client.until("stream.done"))[-1]
    await client.until("postprocess.done")
    await client.send(
        type="stream.resume", chat_id=chat.pk, task_id=done["task_id"], last_sequence=0
    )
    sizes: list[int] = []
    frames = await _raw_until(client, "stream.done", sizes)
    assert max(sizes) <= protocol.MAX_FRAME_BYTES
    parts = frames[:-1]
    assert {f["type"] for f in parts} == {"stream.snapshot"}
    assert len(parts) > 1
    assert [f["part"] for f in parts] == list(range(1, len(parts) + 1))
    assert {f["parts"] for f in parts} == {len(parts)}
    assert {f["sequence"] for f in parts} == {done["sequence"]}
    assert "".join(f["content"] for f in parts) == REPLY
    assert frames[-1]["content_omitted"] is True
    assert frames[-1]["sequence"] == done["sequence"]


async def test_a_socket_that_resumes_a_running_long_reply_gets_the_snapshot_in_parts(
    ws_client, chat, user, llm_script
):
    pieces = [LINE * 8600, "and then ", "it ", "ended."]
    _first_message_script(llm_script, text=pieces, delay_s=0.3)
    first = await ws_client(user)
    await first.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Story")
    accepted = (await first.until("message.accepted"))[-1]
    await first.until("stream.delta")
    second = await ws_client(user)
    await second.send(
        type="stream.resume", chat_id=chat.pk, task_id=accepted["task_id"], last_sequence=0
    )
    sizes: list[int] = []
    frames = await _raw_until(second, "stream.done", sizes)
    assert max(sizes) <= protocol.MAX_FRAME_BYTES
    parts = [f for f in frames if f["type"] == "stream.snapshot"]
    assert len(parts) > 1
    assert [f["part"] for f in parts] == list(range(1, len(parts) + 1))
    text = "".join(f["content"] for f in parts)
    after = [f for f in frames if f["type"] == "stream.delta"]
    assert all(f["sequence"] > parts[0]["sequence"] for f in after)
    assert text + "".join(f["delta"] for f in after) == "".join(pieces)
    await first.until("postprocess.done")


async def test_a_reply_past_the_configured_maximum_is_cut_there_with_finish_reason_length(
    ws_client, chat, user, llm_script, settings
):
    settings.PIPELINE_MAX_REPLY_BYTES = 1000
    _first_message_script(llm_script, text=["é" * 300, "é" * 300, "never sent"])
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Talk")
    frames = await client.until("stream.done")
    done = frames[-1]
    assert done["status"] == "done"
    assert done["finish_reason"] == "length"
    assert done["content"] == "é" * 500
    assert "".join(f["delta"] for f in frames if f["type"] == "stream.delta") == "é" * 500
    row = await _row(done["message_id"])
    kept = sealed_text_open(owner_id=user.pk, object_id=row.pk, sealed=row.server_content or b"")
    assert kept == "é" * 500


def test_the_configured_maximum_never_exceeds_what_clients_can_store(settings: Any) -> None:
    settings.PIPELINE_MAX_REPLY_BYTES = 10 * protocol.MAX_REPLY_BYTES
    assert protocol.max_reply_bytes() == protocol.MAX_REPLY_BYTES
    assert protocol.ciphertext_chars(protocol.max_reply_bytes()) == (
        protocol.MAX_MESSAGE_CIPHERTEXT_CHARS
    )
    settings.PIPELINE_MAX_REPLY_BYTES = 4096
    assert protocol.max_reply_bytes() == 4096


def test_a_stream_done_that_fits_keeps_its_content_and_a_long_one_leaves_it_out() -> None:
    def done(content: str) -> dict[str, Any]:
        return ev.StreamDone(
            chat_id=new_id(),
            task_id=new_id(),
            message_id=new_id(),
            content=content,
            model="m",
            usage={"prompt_tokens": 1, "completion_tokens": 2},
            status="done",
            sequence=7,
        ).to_frame()

    short = done("x" * 200_000)
    assert short["content"] == "x" * 200_000
    assert "content_omitted" not in short
    # 60,000 control characters are 360,000 bytes of JSON.
    long = done("\x01" * 60_000)
    assert "content" not in long
    assert long["content_omitted"] is True
    assert long["sequence"] == 7
    assert ev.frame_bytes(long) < 1024


def test_an_embed_update_too_long_for_a_frame_leaves_its_content_out() -> None:
    small = ev.EmbedUpdate(embed_id=new_id(), status="finished", content="{}").to_frame()
    assert small["content"] == "{}"
    big = ev.EmbedUpdate(embed_id=new_id(), status="finished", content="y" * 300_000)
    frame = big.to_frame()
    assert "content" not in frame
    assert frame["content_omitted"] is True
    assert frame["status"] == "finished"


def test_delta_pieces_keep_every_delta_frame_under_the_limit() -> None:
    text = "\x00" * (3 * ev.MAX_TEXT_CHARS_PER_FRAME + 5)
    pieces = ev.delta_pieces(text)
    assert "".join(pieces) == text
    assert [len(p) for p in pieces] == [ev.MAX_TEXT_CHARS_PER_FRAME] * 3 + [5]
    for number, piece in enumerate(pieces, start=1):
        frame = ev.StreamDelta(
            chat_id=new_id(), task_id=new_id(), message_id=new_id(), sequence=number, delta=piece
        ).to_frame()
        assert ev.frame_bytes(frame) <= protocol.MAX_FRAME_BYTES
    assert ev.delta_pieces("") == []


def test_sync_phase_spreads_large_chats_over_frames_within_4_mib() -> None:
    def message(size: int) -> dict[str, Any]:
        return {"message_id": new_id(), "role": "assistant", "encrypted_content": "A" * size}

    big: dict[str, Any] = {
        "chat_id": new_id(),
        "version": 9,
        "messages": [message(protocol.MAX_MESSAGE_CIPHERTEXT_CHARS) for _ in range(12)],
    }
    small = [{"chat_id": new_id(), "version": 1, "messages": [message(100)]} for _ in range(3)]
    frames = ev.SyncPhase(phase=1, chats=(big, *small)).to_frames()
    assert len(frames) > 1
    for frame in frames:
        assert frame["type"] == "sync.phase"
        assert frame["phase"] == 1
        assert ev.frame_bytes(frame) <= protocol.MAX_BULK_FRAME_BYTES
    copies = [c for f in frames for c in f["chats"]]
    sent = [
        m["message_id"] for c in copies if c["chat_id"] == big["chat_id"] for m in c["messages"]
    ]
    assert sent == [m["message_id"] for m in big["messages"]]
    assert {c["version"] for c in copies if c["chat_id"] == big["chat_id"]} == {9}
    assert [c["chat_id"] for c in copies[-3:]] == [c["chat_id"] for c in small]
    empty = ev.SyncPhase(phase=3, chats=()).to_frames()
    assert empty == [{"type": "sync.phase", "phase": 3, "chats": []}]
