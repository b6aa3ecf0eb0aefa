"""Files in the browser (docs/protocol.md §13): a text file attached in the composer
reaches the scripted model inside the question, an image reaches a scripted *vision*
model as an ``image_url`` part, the database and Redis hold only ciphertext of either
(a canary scan), and the files show with their question after a reload and on another
device (a fresh browser profile), opened from the stored embeds; a pasted and a dropped
file become chips and reach the model; after a cache miss the history the browser sends
brings the earlier questions' files back (the newest that fit its frame)."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

import pytest

from chats import cache
from chats.models import Chat, Embed, Message
from instances.models import Instance
from openmates import llm as gateway
from tests.db_rows import redis_dump, table_rows_text
from tests.file_samples import tiny_png
from tests.ui.pages import PASSWORD, indexeddb_rows, new_user, open_first_chat, unlock, watch
from tests.ui.test_chat import eventually, instance, llm, send
from tests.ui.test_outbox import SOCKET_SWITCH
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]


def _encodings(canary: bytes) -> list[bytes]:
    """The canary, its hex, and its standard/url-safe base64 at every byte alignment."""
    found = [canary, canary.hex().encode()]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + canary)
        core = encoded[{0: 0, 1: 2, 2: 3}[pad] : -4]
        found += [core, core.replace(b"+", b"-").replace(b"/", b"_")]
    return found


def _stored_bytes() -> bytes:
    """Every row of every table as text, and every Redis key and string or list value."""
    chunks = [row.encode() for row in table_rows_text()]
    chunks.append(redis_dump())
    return b"\n".join(chunks)


def _assert_only_ciphertext(secret: bytes) -> None:
    """Every message and embed is stored as ciphertext, and nothing stored holds ``secret``."""
    deadline = time.monotonic() + 15
    while (
        Message.objects.filter(encrypted_content__isnull=True).exists()
        or Embed.objects.filter(encrypted_content__isnull=True).exists()
        or not Embed.objects.exists()
    ):
        assert time.monotonic() < deadline, "a message or a file was never stored"
        time.sleep(0.1)
    stored = _stored_bytes()
    for embed_id in Embed.objects.values_list("pk", flat=True):
        assert str(embed_id).encode() in stored  # the scan covers the embeds' rows
    for needle in _encodings(secret):
        assert needle not in stored, f"stored data holds {needle!r}"


def _asked(llm: UIModelServer) -> Any:
    """The user message of the last main (streamed, not JSON) request."""
    answers = [r for r in llm.requests if r.get("stream") and not r.get("response_format")]
    return answers[-1]["messages"][-1]["content"]


def _attach(page: Any, name: str, mime: str, data: bytes) -> None:
    page.set_input_files("#file-input", files=[{"name": name, "mimeType": mime, "buffer": data}])
    page.wait_for_selector(f"#composer-files .file-chip:has-text('{name}')")


def _opened(page: Any, name: str) -> str:
    """The text of the file the chip ``name`` of a question opens (downloads)."""
    chip = page.locator(f".msg-user .msg-files .file-chip:has-text('{name}')")
    chip.wait_for()
    with page.expect_download() as download:
        chip.click()
    assert download.value.suggested_filename == name
    with open(download.value.path(), encoding="utf-8") as opened:
        return opened.read()


def test_a_text_file_reaches_the_model_rests_encrypted_and_shows_after_reload_and_elsewhere(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_browser: Any, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=["Your notes are about wombats."]))
    canary = f"wombatcanary{secrets.token_hex(6)}"
    note = f"Shopping list\n- apples\n- {canary}\n"
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "filer")
    page.wait_for_selector("#conn[data-state=open]")

    _attach(page, "notes.txt", "text/plain", note.encode())
    send(page, "Summarise my notes")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('wombats')")

    assert _asked(llm) == (
        f'Summarise my notes\n\n<file name="notes.txt" type="text/plain">\n{note}\n</file>'
    )
    assert page.locator("#composer-files .file-chip").count() == 0
    assert _opened(page, "notes.txt") == note
    _assert_only_ciphertext(canary.encode())

    page.reload()
    open_first_chat(page)
    assert _opened(page, "notes.txt") == note
    # Regenerate reads the file again: the browser sends it from the stored embed.
    llm.queue(Turn(pieces=["Still wombats."]))
    page.locator(".msg-assistant").last.locator(".regenerate").click()
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Still wombats.')")
    assert _asked(llm) == (
        f'Summarise my notes\n\n<file name="notes.txt" type="text/plain">\n{note}\n</file>'
    )

    # An edit of the question keeps its file (a copy under the edited question).
    llm.queue(Turn(pieces=["Edited wombats."]))
    page.locator(".msg-user").first.locator(".edit").click()
    page.fill(".edit-input", "Summarise my notes briefly")
    page.click(".edit-save")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Edited wombats.')")
    assert _asked(llm) == (
        f'Summarise my notes briefly\n\n<file name="notes.txt" type="text/plain">\n{note}\n</file>'
    )
    assert _opened(page, "notes.txt") == note
    assert Embed.objects.filter(tool="file").count() == 2

    # Another device: a fresh profile signs in and reads the file from its stored embed.
    other = ui_browser.new_context(accept_downloads=True)
    try:
        second = other.new_page()
        watch(second)
        second.goto(f"{asgi_server}/accounts/login/")
        second.fill("#id_username", "filer")
        second.fill("#id_password", PASSWORD)
        second.click("button[type=submit]")
        second.wait_for_url(f"{asgi_server}/")
        open_first_chat(second)
        assert _opened(second, "notes.txt") == note
        assert "notes.txt" in second.text_content(".msg-user .file-chip .file-name")
    finally:
        other.close()
    assert watched.csp_violations() == []


def test_the_composer_refuses_a_file_it_cannot_send_and_says_why(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    page = ui_context.new_page()
    watch(page)
    new_user(page, asgi_server, "refuser")
    page.wait_for_selector("#conn[data-state=open]")
    archive = {"name": "backup.zip", "mimeType": "application/zip", "buffer": b"PK\x03\x04"}
    page.set_input_files("#file-input", files=[archive])
    page.wait_for_selector("#composer-status:has-text('backup.zip')")
    assert "only images" in (page.text_content("#composer-status") or "")
    big = {"name": "big.txt", "mimeType": "text/plain", "buffer": b"a" * (2 * 1024 * 1024 + 1)}
    page.set_input_files("#file-input", files=[big])
    page.wait_for_selector("#composer-status:has-text('at most 2 MiB')")
    assert page.locator("#composer-files .file-chip").count() == 0

    # A file the browser lets through but the server cannot read is refused, not sent.
    _attach(page, "broken.pdf", "application/pdf", b"%PDF-1.4\n1 0 obj garbage")
    # A file taken: the earlier refusal's reason no longer stands in the status line.
    assert page.text_content("#composer-status") == ""
    send(page, "Read this")
    page.wait_for_selector("#composer-status:has-text('Not sent')")
    status = page.text_content("#composer-status") or ""
    assert "broken.pdf" in status
    assert not status.startswith("Not sent: files.")
    assert status.endswith("Your text is back in the box.")
    # The refused question leaves the conversation; its text is in the box again.
    assert page.locator(".msg-user").count() == 0
    assert page.input_value("#composer-input") == "Read this"
    assert llm.requests == []
    assert Message.objects.count() == 0
    # The chat made for it went too: no empty "New chat" is left in the list.
    page.wait_for_selector(".chat-item", state="detached")
    assert not Chat.objects.exists()

    # Refused in a chat that has messages, the chat stays.
    send(page, "Hello")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    _attach(page, "broken.pdf", "application/pdf", b"%PDF-1.4\n1 0 obj garbage")
    send(page, "Read this")
    page.wait_for_selector("#composer-status:has-text('Not sent')")
    assert page.locator(".chat-item").count() == 1
    assert Chat.objects.count() == 1


@pytest.fixture
def vision_instance(instance: Instance, llm: UIModelServer) -> Instance:
    """The instance's tiers on a model name LiteLLM's map says sees images, served by
    the scripted model server."""
    instance.tier_map = {
        tier: [{"model": "openai/gpt-4o", "api_base": llm.api_base}] for tier in gateway.TIERS
    }
    instance.save()
    return instance


def test_an_image_reaches_a_vision_model_as_an_image_part_and_rests_encrypted(
    asgi_server: str, vision_instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=["A small magenta square."]))
    png = tiny_png(3, 3, (201, 31, 93))
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "seer")
    page.wait_for_selector("#conn[data-state=open]")

    _attach(page, "square.png", "image/png", png)
    assert page.locator("#composer-files .file-chip img.file-thumb").count() == 1
    send(page, "What is in the picture?")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('magenta')")

    content = _asked(llm)
    assert isinstance(content, list)
    assert content[0] == {"type": "text", "text": "What is in the picture?\n\n[image: square.png]"}
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{base64.b64encode(png).decode()}"},
    }
    _assert_only_ciphertext(png)

    page.reload()
    open_first_chat(page)
    thumb = page.locator(".msg-user .msg-files img.file-thumb")
    thumb.wait_for()
    width = thumb.evaluate("(img) => img.complete ? img.naturalWidth : 0")
    assert width == 3  # the stored image itself, decrypted
    assert watched.csp_violations() == []


def test_a_file_sent_while_offline_survives_a_reload_in_the_outbox_encrypted(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=["First."]), Turn(pieces=["Got the offline file."]))
    canary = f"offlinecanary{secrets.token_hex(6)}"
    ui_context.add_init_script(SOCKET_SWITCH)
    page = ui_context.new_page()
    watch(page)
    new_user(page, asgi_server, "offliner")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "Hello")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('First.')")

    page.evaluate("window.__cutSockets()")
    page.wait_for_selector("#conn[data-state=reconnecting]")
    _attach(page, "later.csv", "text/csv", f"id,word\n1,{canary}\n".encode())
    send(page, "Read this when you can")
    page.wait_for_selector(".msg-user[data-status=waiting] .msg-files .file-chip")
    # IndexedDB's outbox holds the text and the file only as envelopes (written just after
    # the message shows).
    assert eventually(lambda: "encrypted_files" in indexeddb_rows(page, "outbox"))
    kept = indexeddb_rows(page, "outbox")
    assert canary not in kept
    for needle in _encodings(canary.encode()):
        assert needle.decode() not in kept

    page.reload()  # the socket switch starts up again: the page connects
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")
    deadline = time.monotonic() + 20
    while not _asked_with(llm, "later.csv"):
        assert time.monotonic() < deadline, "the kept message never reached the model"
        page.wait_for_timeout(100)
    block = f'<file name="later.csv" type="text/csv">\nid,word\n1,{canary}\n\n</file>'
    assert _asked_with(llm, "later.csv") == [f"Read this when you can\n\n{block}"]
    page.click(".chat-item .chat-item-open")
    assert _opened(page, "later.csv") == f"id,word\n1,{canary}\n"
    _assert_only_ciphertext(canary.encode())


def _asked_with(llm: UIModelServer, name: str) -> list[str]:
    """The questions of the main requests so far that name ``name``."""
    answers = [r for r in llm.requests if r.get("stream") and not r.get("response_format")]
    questions = [str(r["messages"][-1]["content"]) for r in answers]
    return [q for q in questions if name in q]


def test_retry_of_a_failed_answer_sends_the_questions_file_again(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=[], status=400), Turn(pieces=["Answered after retry."]))
    page = ui_context.new_page()
    watch(page)
    new_user(page, asgi_server, "retrier")
    page.wait_for_selector("#conn[data-state=open]")
    _attach(page, "todo.md", "text/markdown", b"- feed the cat\n")
    send(page, "What is on my list?")
    page.wait_for_selector(".msg-assistant[data-status=failed] button.retry")
    page.click(".msg-assistant[data-status=failed] button.retry")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('after retry')")
    block = '<file name="todo.md" type="text/markdown">\n- feed the cat\n\n</file>'
    assert _asked_with(llm, "todo.md") == [f"What is on my list?\n\n{block}"] * 2


def test_a_file_at_the_size_limit_is_sent_stored_and_cut_to_the_context(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=["A long log."]))
    line = b"2026-12-01 12:00:00 INFO the service answered in 12 ms\n"
    log = (line * (2 * 1024 * 1024 // len(line) + 1))[: 2 * 1024 * 1024]
    page = ui_context.new_page()
    watch(page)
    new_user(page, asgi_server, "biglog")
    page.wait_for_selector("#conn[data-state=open]")
    _attach(page, "service.log", "text/plain", log)
    send(page, "Anything odd in this log?")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('A long log.')")

    (asked,) = _asked_with(llm, "service.log")
    assert asked.startswith(
        'Anything odd in this log?\n\n<file name="service.log" type="text/plain">\n'
    )
    # The model's context (8,192 tokens for a model LiteLLM does not know) holds a part.
    assert f" of {len(log)} characters shown]\n</file>" in asked
    assert 8_000 < len(asked) < 20_000
    deadline = time.monotonic() + 20
    while not Embed.objects.filter(encrypted_content__isnull=False).exists():
        assert time.monotonic() < deadline, "the file's embed was never stored"
        time.sleep(0.1)
    stored = Embed.objects.get().encrypted_content or ""
    assert len(stored) > len(log) * 4 // 3  # the whole file, encrypted


def _history_question(llm: UIModelServer, text: str) -> str:
    """The content of the user message starting with ``text`` in the last main request's
    history (every message but its last)."""
    answers = [r for r in llm.requests if r.get("stream") and not r.get("response_format")]
    history = answers[-1]["messages"][:-1]
    (found,) = [m["content"] for m in history if str(m["content"]).startswith(text)]
    return str(found)


def _evict(username: str) -> None:
    """The AI cache loses the user's chat, as when it is evicted for newer chats
    (``cache.chat_forget`` would also mark the chat deleted)."""
    chat = Chat.objects.get(owner__username=username)
    redis = cache.redis_client()
    redis.delete(cache.ai_key(chat.owner_id, chat.pk))
    redis.zrem(cache.lru_key(chat.owner_id), chat.pk)


def _stored(username: str, messages: int) -> None:
    deadline = time.monotonic() + 20
    while (
        Message.objects.filter(
            chat__owner__username=username, encrypted_content__isnull=False
        ).count()
        < messages
        or Embed.objects.filter(chat__owner__username=username, encrypted_content=None).exists()
    ):
        assert time.monotonic() < deadline, "the messages or their files were never stored"
        time.sleep(0.1)


def test_after_a_cache_miss_the_history_brings_the_files_of_earlier_questions(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(
        Turn(pieces=["Two logs and a pond."]),
        Turn(pieces=["The second log."]),
        Turn(pieces=["Read from the history."]),
    )
    line = b"2026-12-01 12:00:00 INFO the service answered in 12 ms\n"
    log = (line * (2 * 1024 * 1024 // len(line) + 1))[: 2 * 1024 * 1024 - 64]
    page = ui_context.new_page()
    watch(page)
    new_user(page, asgi_server, "historian")
    page.wait_for_selector("#conn[data-state=open]")
    _attach(page, "first.log", "text/plain", b"FIRST " + log)
    _attach(page, "pond.png", "image/png", tiny_png())
    send(page, "Keep the first log")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('a pond')")
    _attach(page, "second.log", "text/plain", b"SECOND " + log)
    send(page, "Keep the second log")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('second log')")
    _stored("historian", 4)

    # A reload: the page holds the files only as the stored embeds.
    page.reload()
    open_first_chat(page)
    _evict("historian")
    send(page, "Which logs do you have?")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('the history')")

    # Both files' data do not fit one chat.history frame (4 MiB): the newest is sent, the
    # older one named, with the image by its name.
    second = _history_question(llm, "Keep the second log")
    assert second.startswith(
        'Keep the second log\n\n<file name="second.log" type="text/plain">\nSECOND 2026-12-01'
    )
    assert " characters shown]\n</file>" in second
    first = _history_question(llm, "Keep the first log")
    assert first == (
        "Keep the first log\n\n[image: pond.png]\n\n"
        "[file: first.log (attached earlier; its content did not fit in this history)]"
    )


# Dispatches a paste (on the composer's text box) or a drop (on the composer) of one file
# built in the page, as the browser does for a file from the clipboard or the desktop.
_FILE_EVENT = """([kind, name, type, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, { type }));
  const init = { bubbles: true, cancelable: true };
  if (kind === "paste") {
    const event = new ClipboardEvent("paste", { ...init, clipboardData: transfer });
    document.getElementById("composer-input").dispatchEvent(event);
    return event.defaultPrevented;
  }
  const composer = document.getElementById("composer");
  const over = new DragEvent("dragover", { ...init, dataTransfer: transfer });
  composer.dispatchEvent(over);
  const drop = new DragEvent("drop", { ...init, dataTransfer: transfer });
  composer.dispatchEvent(drop);
  return over.defaultPrevented && drop.defaultPrevented;
}"""


def test_a_pasted_and_a_dropped_file_become_chips_and_reach_the_model(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(Turn(pieces=["Both files read."]))
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, asgi_server, "paster")
    page.wait_for_selector("#conn[data-state=open]")

    pasted = "# Pasted\nfrom the clipboard\n"
    assert page.evaluate(_FILE_EVENT, ["paste", "clip.md", "text/markdown", pasted]) is True
    page.wait_for_selector("#composer-files .file-chip:has-text('clip.md')")
    dropped = "id,where\n1,desktop\n"
    assert page.evaluate(_FILE_EVENT, ["drop", "table.csv", "text/csv", dropped]) is True
    page.wait_for_selector("#composer-files .file-chip:has-text('table.csv')")
    chips = page.locator("#composer-files .file-chip")
    assert chips.locator(".file-name").all_inner_texts() == ["clip.md", "table.csv"]
    assert chips.locator(".file-size").all_inner_texts() == [
        f"{len(pasted)} bytes",
        f"{len(dropped)} bytes",
    ]
    # A paste of text only is left to the text box.
    words_only = """() => {
      const transfer = new DataTransfer();
      transfer.setData("text/plain", "just words");
      const init = { bubbles: true, cancelable: true, clipboardData: transfer };
      const event = new ClipboardEvent("paste", init);
      document.getElementById("composer-input").dispatchEvent(event);
      return event.defaultPrevented;
    }"""
    assert page.evaluate(words_only) is False
    assert chips.count() == 2

    send(page, "Read both")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Both files')")
    assert _asked(llm) == (
        f'Read both\n\n<file name="clip.md" type="text/markdown">\n{pasted}\n</file>'
        f'\n\n<file name="table.csv" type="text/csv">\n{dropped}\n</file>'
    )
    assert page.locator("#composer-files .file-chip").count() == 0
    assert page.locator(".msg-user .msg-files .file-chip").count() == 2
    assert watched.csp_violations() == []
