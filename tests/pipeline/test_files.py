"""Files attached to a message (docs/protocol.md §13): the frame's checks and limits,
PDF text, and what the model and the AI cache get — image parts for a model that sees
images, text for the others and for the bundled base model — over /ws/chat/ with the
real stack (PostgreSQL, Redis, OpenBao) and a scripted model."""

from __future__ import annotations

import base64
import json
from typing import Any

import litellm
import pytest
from asgiref.sync import sync_to_async

from chats import cache as chat_cache
from chats.models import Embed
from openmates import llm
from pipeline import files as turn_files
from pipeline.file_types import file_kind
from pipeline.ids import new_id
from pipeline.protocol import (
    MAX_FRAME_BYTES,
    ChatHistory,
    ErrorCode,
    FrameError,
    MessageSend,
    parse_frame,
)
from pipeline.turn import instance_context_forget
from tests.file_samples import tiny_pdf, tiny_png
from tests.llm_fake import WireReply, sse_body
from tests.pipeline.test_versions import chat, user

__all__ = ["chat", "user"]  # fixtures: a keyed user and a chat with only the main call

CHAT = "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"
MESSAGE = "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2c"
VISION_MODEL = "scripted/vision"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def attachment(name: str, mime: str, data: bytes, embed_id: str | None = None) -> dict[str, Any]:
    return {"embed_id": embed_id or new_id(), "name": name, "mime": mime, "data": b64(data)}


def send_frame(files: list[dict[str, Any]], **extra: Any) -> str:
    frame = {"type": "message.send", "chat_id": CHAT, "message_id": MESSAGE, "content": "Look"}
    return json.dumps({**frame, "files": files, **extra})


def parsed(text: str) -> MessageSend:
    frame = parse_frame(text)
    assert isinstance(frame, MessageSend)
    return frame


def refusal(text: str) -> FrameError:
    with pytest.raises(FrameError) as caught:
        parse_frame(text)
    return caught.value


# --- the frame ---------------------------------------------------------------------------


def test_a_message_with_files_parses_and_may_be_a_bulk_frame():
    big_text = b"line of notes\n" * 40_000  # 560 KB: past the 256 KiB of a plain frame
    frame = parsed(send_frame([attachment("notes.md", "text/markdown", big_text)]))
    assert frame.files is not None
    assert frame.files[0].name == "notes.md"
    assert frame.files[0].size == len(big_text)
    # The same size without files is still over the plain frame limit.
    padded = json.dumps({"type": "message.send", "pad": "x" * MAX_FRAME_BYTES})
    assert refusal(padded).code == ErrorCode.FRAME_TOO_LARGE


def test_a_file_over_its_limit_is_file_too_large(settings):
    settings.PIPELINE_MAX_FILE_BYTES = 1000
    error = refusal(send_frame([attachment("a.txt", "text/plain", b"a" * 1001)]))
    assert error.code == ErrorCode.FILE_TOO_LARGE
    assert "'a.txt' is larger than 1000 bytes" in error.message
    assert error.ids == {"chat_id": CHAT, "message_id": MESSAGE}
    assert parsed(send_frame([attachment("a.txt", "text/plain", b"a" * 1000)])).files


def test_files_together_over_the_total_are_file_too_large(settings):
    settings.PIPELINE_MAX_FILES_BYTES = 3000
    files = [attachment(f"{n}.txt", "text/plain", b"b" * 1200) for n in range(3)]
    error = refusal(send_frame(files))
    assert error.code == ErrorCode.FILE_TOO_LARGE
    assert "together" in error.message
    assert len(parsed(send_frame(files[:2])).files or []) == 2


def test_more_than_eight_files_or_a_repeated_embed_id_is_invalid():
    nine = [attachment(f"{n}.txt", "text/plain", b"x") for n in range(9)]
    assert refusal(send_frame(nine)).code == ErrorCode.INVALID_FRAME
    same = new_id()
    twice = [
        attachment("a.txt", "text/plain", b"x", same),
        attachment("b.txt", "text/plain", b"y", same),
    ]
    assert refusal(send_frame(twice)).code == ErrorCode.INVALID_FRAME


@pytest.mark.parametrize(
    ("name", "mime", "data"),
    [
        ("tool.exe", "application/x-msdownload", b"MZ\x90\x00"),
        ("photo.png", "image/png", b"GIF89a not a png"),  # bytes that are not its type
        ("paper.pdf", "application/pdf", b"not a pdf"),
        ("scan.tiff", "image/tiff", b"II*\x00"),
    ],
)
def test_a_file_that_is_not_an_image_or_text_is_unsupported(name, mime, data):
    error = refusal(send_frame([attachment(name, mime, data)]))
    assert error.code == ErrorCode.UNSUPPORTED_FILE
    assert repr(name) in error.message


def test_bad_base64_or_a_bad_embed_id_is_invalid():
    bad = {"embed_id": new_id(), "name": "a.txt", "mime": "text/plain", "data": "not base64!"}
    assert refusal(send_frame([bad])).code == ErrorCode.INVALID_FRAME
    wrong_id = {**attachment("a.txt", "text/plain", b"x"), "embed_id": "not-an-id"}
    assert refusal(send_frame([wrong_id])).code == ErrorCode.INVALID_FRAME


def test_file_kind_goes_by_type_name_and_first_bytes():
    assert file_kind(mime="image/png", name="x.png", head=tiny_png()[:16]) == "image"
    assert file_kind(mime="", name="main.py", head=b"import os") == "text"
    assert file_kind(mime="application/octet-stream", name="data.csv", head=b"a,b") == "text"
    assert file_kind(mime="application/json", name="x", head=b"{}") == "text"
    assert file_kind(mime="", name="paper.pdf", head=b"%PDF-1.4") == "pdf"
    assert file_kind(mime="application/zip", name="x.zip", head=b"PK\x03\x04") is None


# --- reading ---------------------------------------------------------------------------


def test_pdf_text_is_extracted_and_text_must_be_utf8():
    read = turn_files.turn_file(
        embed_id=new_id(), name="r.pdf", mime="application/pdf", data_b64=b64(tiny_pdf("Otter 77"))
    )
    assert (read.kind, read.text) == ("text", "Otter 77")
    with pytest.raises(turn_files.UnsupportedFile, match="not UTF-8"):
        turn_files.turn_file(
            embed_id=new_id(), name="a.txt", mime="text/plain", data_b64=b64(b"\xff\xfe\x00a")
        )
    broken = b"%PDF-1.4\n1 0 obj garbage"
    with pytest.raises(turn_files.UnsupportedFile, match="PDF"):
        turn_files.turn_file(
            embed_id=new_id(), name="b.pdf", mime="application/pdf", data_b64=b64(broken)
        )


def test_text_blocks_are_cut_to_the_budget_and_say_so():
    long = turn_files.TurnFile(
        embed_id=new_id(), name="log.txt", mime="text/plain", kind="text", text="word " * 5000
    )
    image = turn_files.TurnFile(
        embed_id=new_id(), name="cat.png", mime="image/png", kind="image", data=tiny_png()
    )
    text = turn_files.history_text("Summarise", [long, image], budget_tokens=200)
    assert text.startswith('Summarise\n\n<file name="log.txt" type="text/plain">\nword word')
    assert "[truncated: " in text
    assert text.endswith("</file>\n\n[image: cat.png]")
    assert 100 < turn_files.estimate_content_tokens(text) <= 220
    blind = turn_files.user_content("Summarise", [image], vision=False, budget_tokens=200)
    assert blind == "Summarise\n\n[image: cat.png (attached, but this model cannot see images)]"


# --- the turn ------------------------------------------------------------------------------


@pytest.fixture
def vision_tiers(instance: Any) -> Any:
    """The instance's tiers on a model LiteLLM's map says sees images."""
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
    instance.tier_map = {t: [{"model": VISION_MODEL}] for t in llm.TIERS}
    instance.save()
    instance_context_forget()
    return instance


async def _send(client: Any, chat: Any, content: str, files: list[dict[str, Any]]) -> list[Any]:
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content=content, files=files
    )
    frames = await client.until("stream.done")
    assert frames[-1]["status"] == "done", frames
    return frames


def _question(llm_script: Any) -> Any:
    return llm_script.requests[-1].messages[-1]["content"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_vision_model_gets_the_image_as_a_part_and_the_cache_a_placeholder(
    ws_client, chat, user, llm_script, vision_tiers
):
    client = await ws_client(user)
    llm_script.reply(text="A pink square.")
    png = tiny_png()
    image = attachment("square.png", "image/png", png)
    notes = attachment("notes.csv", "text/csv", b"colour,count\npink,1\n")
    await _send(client, chat, "What is this?", [image, notes])

    content = _question(llm_script)
    assert isinstance(content, list)
    assert content[0]["type"] == "text"
    assert content[0]["text"].startswith('What is this?\n\n<file name="notes.csv" type="text/csv">')
    assert "pink,1" in content[0]["text"]
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64(png)}"},
    }
    cached = await chat_cache.ai_history_read(user_id=user.pk, chat_id=chat.pk)
    question = (cached.messages or [])[0]["content"]
    assert question.endswith("[image: square.png]")
    assert "pink,1" in question
    assert b64(png) not in json.dumps(cached.messages)
    embeds = await sync_to_async(lambda: list(Embed.objects.filter(chat_id=chat.pk)))()
    assert sorted(e.pk for e in embeds) == sorted([image["embed_id"], notes["embed_id"]])
    assert {(e.tool, e.status, e.encrypted_content) for e in embeds} == {("file", "finished", None)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_model_without_vision_gets_text_and_a_note_for_the_image(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    llm_script.reply(text="Read it.")
    pdf = attachment("report.pdf", "application/pdf", tiny_pdf("Quarterly otters 12"))
    image = attachment("chart.png", "image/png", tiny_png())
    await _send(client, chat, "Summarise", [pdf, image])

    content = _question(llm_script)
    assert content == (
        'Summarise\n\n<file name="report.pdf" type="application/pdf">\nQuarterly otters 12\n'
        "</file>\n\n[image: chart.png (attached, but this model cannot see images)]"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_an_unreadable_file_refuses_the_frame_before_anything_is_written(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    message_id = new_id()
    broken = attachment("broken.pdf", "application/pdf", b"%PDF-1.4\n1 0 obj garbage")
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi", files=[broken]
    )
    error = await client.until("error")
    assert error[-1]["code"] == "unsupported_file"
    assert error[-1]["message_id"] == message_id
    assert "'broken.pdf'" in error[-1]["message"]
    count = await sync_to_async(lambda: chat.messages.count() + Embed.objects.count())()
    assert count == 0
    assert llm_script.requests == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_files_embed_id_in_use_is_named_in_the_error_and_the_message_stays_free(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    llm_script.reply(text="Got it.")
    notes = attachment("notes.txt", "text/plain", b"first")
    await _send(client, chat, "Keep this", [notes])
    message_id = new_id()
    again = {**attachment("other.txt", "text/plain", b"second"), "embed_id": notes["embed_id"]}
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi", files=[again]
    )
    error = (await client.until("error"))[-1]
    assert (error["code"], error["message"]) == (
        "invalid_frame",
        "A file's embed_id is already in use.",
    )
    # Nothing of it was written: the same message id, with a fresh embed id, is accepted.
    llm_script.reply(text="Now it is.")
    fresh = attachment("other.txt", "text/plain", b"second")
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Hi", files=[fresh]
    )
    frames = await client.until("stream.done")
    assert frames[-1]["status"] == "done"


async def test_the_bundled_base_model_never_gets_images():
    from types import SimpleNamespace

    base = SimpleNamespace(
        tier_map={t: [{"model": "text-completion-openai/gemma-3-270m"}] for t in llm.TIERS}
    )
    vision = SimpleNamespace(tier_map={t: [{"model": "openai/gpt-4o"}] for t in llm.TIERS})
    assert await llm.supports_vision(tier="fast", instance=base) is False
    assert await llm.supports_vision(tier="fast", instance=vision) is True
    image = turn_files.TurnFile(
        embed_id=new_id(), name="cat.png", mime="image/png", kind="image", data=tiny_png()
    )
    text = turn_files.TurnFile(
        embed_id=new_id(), name="a.md", mime="text/markdown", kind="text", text="# Title"
    )
    content = turn_files.user_content("Hi", [text, image], vision=False, budget_tokens=100)
    assert isinstance(content, str)
    assert '<file name="a.md" type="text/markdown">\n# Title\n</file>' in content


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_regenerate_carries_the_questions_files_again(ws_client, chat, user, llm_script):
    client = await ws_client(user)
    llm_script.reply(text="First reading.")
    llm_script.reply(text="Second reading.")
    notes = attachment("plan.md", "text/markdown", b"# Plan\nBuild a raft.\n")
    frames = await _send(client, chat, "Read the plan", [notes])
    answer = frames[-1]["message_id"]
    await client.send(
        type="message.regenerate",
        chat_id=chat.pk,
        message_id=answer,
        content="Read the plan",
        files=[notes],
    )
    again = await client.until("stream.done")
    assert again[-1]["status"] == "done", again
    assert _question(llm_script) == (
        'Read the plan\n\n<file name="plan.md" type="text/markdown">\n'
        "# Plan\nBuild a raft.\n\n</file>"
    )
    # The question's embeds were made once, with the question.
    count = await sync_to_async(lambda: Embed.objects.filter(chat_id=chat.pk).count())()
    assert count == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_retry_carries_the_questions_files_again(ws_client, chat, user, llm_script):
    client = await ws_client(user)
    llm_script.reply(error=400)
    llm_script.reply(text="Read on the second try.")
    notes = attachment("todo.txt", "text/plain", b"feed the cat\n")
    message_id = new_id()
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=message_id, content="Do", files=[notes]
    )
    failed = await client.until("stream.done")
    assert failed[-1]["status"] == "failed", failed
    await client.send(type="message.retry", chat_id=chat.pk, message_id=message_id, files=[notes])
    again = await client.until("stream.done")
    assert again[-1]["status"] == "done", again
    assert _question(llm_script) == (
        'Do\n\n<file name="todo.txt" type="text/plain">\nfeed the cat\n\n</file>'
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_the_bundled_base_model_gets_the_files_text_and_no_image(
    ws_client, chat, user, instance, llm_wire
):
    instance.tier_map = {
        t: [{"model": "text-completion-openai/gemma-3-270m", "api_base": llm_wire.api_base}]
        for t in llm.TIERS
    }
    await sync_to_async(instance.save)()
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "g"}
    llm_wire.queue(
        WireReply(
            [
                sse_body(
                    [{**chunk, "choices": [{"index": 0, "text": " Ok.", "finish_reason": "stop"}]}]
                )
            ]
        )
    )
    client = await ws_client(user)
    png = tiny_png()
    files = [
        attachment("recipe.txt", "text/plain", b"Two eggs, one pan.\n"),
        attachment("dish.png", "image/png", png),
    ]
    frames = await _send(client, chat, "What do I cook?", files)
    assert frames[-1]["content"] == "Ok."

    (sent,) = llm_wire.requests
    assert sent["path"] == "/v1/completions"
    prompt = sent["body"]["prompt"]
    assert (
        'Q: What do I cook?\n\n<file name="recipe.txt" type="text/plain">\nTwo eggs, one pan.\n\n'
        "</file>\n\n[image: dish.png (attached, but this model cannot see images)]\nA:"
    ) in prompt
    assert b64(png) not in json.dumps(sent["body"])


# --- a history the client sends ---------------------------------------------------------


def history_frame(messages: list[dict[str, Any]]) -> str:
    request = {"type": "chat.history", "chat_id": CHAT, "request_id": "r1"}
    return json.dumps({**request, "messages": messages})


def history_files(messages: list[dict[str, Any]]) -> list[Any]:
    """The files of the first message of a parsed ``chat.history``."""
    frame = parse_frame(history_frame(messages))
    assert isinstance(frame, ChatHistory)
    return frame.messages[0].files or []


def test_a_history_carries_files_of_questions_only_within_their_limits(settings):
    settings.PIPELINE_MAX_FILE_BYTES = 1000
    notes = attachment("n.txt", "text/plain", b"x" * 1000)
    question = {"message_id": MESSAGE, "role": "user", "content": "Q", "files": [notes]}
    assert [f.data for f in history_files([question])] == [notes["data"]]
    named = {k: v for k, v in attachment("cat.png", "image/png", b"").items() if k != "data"}
    assert [f.data for f in history_files([{**question, "files": [named]}])] == [None]

    big = attachment("n.txt", "text/plain", b"x" * 1001)
    error = refusal(history_frame([{**question, "files": [big]}]))
    assert error.code == ErrorCode.FILE_TOO_LARGE
    assert "'n.txt' is larger than 1000 bytes" in error.message
    answer = {**question, "role": "assistant"}
    assert refusal(history_frame([answer])).code == ErrorCode.INVALID_FRAME
    assert refusal(history_frame([{**question, "files": [notes, notes]}])).code == (
        ErrorCode.INVALID_FRAME
    )
    bad = {**notes, "data": "not base64!"}
    assert refusal(history_frame([{**question, "files": [bad]}])).code == ErrorCode.INVALID_FRAME


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_after_a_cache_miss_the_history_brings_an_earlier_files_text_back(
    ws_client, chat, user, llm_script
):
    client = await ws_client(user)
    llm_script.reply(text="Noted the otters.")
    llm_script.reply(text="Twelve otters.")
    notes = attachment("census.csv", "text/csv", b"animal,count\notter,12\n")
    image = attachment("pond.png", "image/png", tiny_png())
    report = attachment("report.pdf", "application/pdf", tiny_pdf("Otter report 2026"))
    old = attachment("old.md", "text/markdown", b"# Old notes\n")
    question = new_id()
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=question,
        content="Keep these",
        files=[notes, image, report, old],
    )
    answer = (await client.until("stream.done"))[-1]
    assert answer["status"] == "done", answer

    # The AI cache lost the chat (evicted or expired): the follow-up asks the client.
    await chat_cache.aredis_client().delete(chat_cache.ai_key(user.pk, chat.pk))
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="How many otters?"
    )
    asked = (await client.until("request_chat_history"))[-1]
    assert asked["expected_messages"] == 2
    # As the browser sends it: an image by its name only, a file with no room left out.
    sent_files = [notes, {k: v for k, v in image.items() if k != "data"}, report]
    sent_files.append({k: v for k, v in old.items() if k != "data"})
    await client.send(
        type="chat.history",
        chat_id=chat.pk,
        request_id=asked["request_id"],
        messages=[
            {"message_id": question, "role": "user", "content": "Keep these", "files": sent_files},
            {
                "message_id": answer["message_id"],
                "role": "assistant",
                "content": "Noted the otters.",
            },
        ],
    )
    done = (await client.until("stream.done"))[-1]
    assert done["status"] == "done", done

    expected = (
        'Keep these\n\n<file name="census.csv" type="text/csv">\nanimal,count\notter,12\n\n</file>'
        '\n\n<file name="report.pdf" type="application/pdf">\nOtter report 2026\n</file>'
        "\n\n[image: pond.png]"
        "\n\n[file: old.md (attached earlier; its content did not fit in this history)]"
    )
    messages = llm_script.requests[-1].messages
    assert [m["content"] for m in messages[-3:]] == [
        expected,
        "Noted the otters.",
        "How many otters?",
    ]
    cached = await chat_cache.ai_history_read(user_id=user.pk, chat_id=chat.pk)
    assert (cached.messages or [])[0]["content"] == expected
    assert "files" not in (cached.messages or [])[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_fallback_that_cannot_see_images_gets_the_note_instead_of_the_image(
    ws_client, chat, user, llm_script, vision_tiers
):
    vision_tiers.tier_map = {
        t: [{"model": VISION_MODEL}, {"model": "scripted/blind"}] for t in llm.TIERS
    }
    await sync_to_async(vision_tiers.save)()
    instance_context_forget()
    llm_script.reply(error=400)  # the vision model refuses: the gateway falls back
    llm_script.reply(text="Read the caption only.")
    client = await ws_client(user)
    png = tiny_png()
    image = attachment("map.png", "image/png", png)
    notes = attachment("caption.txt", "text/plain", b"A map of the bay.\n")
    await _send(client, chat, "What is this?", [image, notes])

    first, fallback = llm_script.requests[-2:]
    assert (first.model, fallback.model) == ("vision", "blind")
    assert [p["type"] for p in first.messages[-1]["content"]] == ["text", "image_url"]
    assert fallback.messages[-1]["content"] == (
        'What is this?\n\n<file name="caption.txt" type="text/plain">\nA map of the bay.\n\n'
        "</file>\n\n[image: map.png (attached, but this model cannot see images)]"
    )
    assert b64(png) not in json.dumps(fallback.messages)
    assert fallback.messages[:-1] == first.messages[:-1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
async def test_a_fallback_that_sees_images_gets_the_image_a_first_model_could_not_see(
    ws_client, chat, user, llm_script, vision_tiers
):
    vision_tiers.tier_map = {
        t: [{"model": "scripted/blind"}, {"model": VISION_MODEL}] for t in llm.TIERS
    }
    await sync_to_async(vision_tiers.save)()
    instance_context_forget()
    llm_script.reply(error=400)
    llm_script.reply(text="A tiny square.")
    client = await ws_client(user)
    png = tiny_png()
    await _send(client, chat, "And this?", [attachment("dot.png", "image/png", png)])

    first, fallback = llm_script.requests[-2:]
    assert (first.model, fallback.model) == ("blind", "vision")
    assert first.messages[-1]["content"] == (
        "And this?\n\n[image: dot.png (attached, but this model cannot see images)]"
    )
    assert fallback.messages[-1]["content"] == [
        {"type": "text", "text": "And this?\n\n[image: dot.png]"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(png)}"}},
    ]
