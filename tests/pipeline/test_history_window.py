"""A long chat's turn reads only the newest part of the AI cache (``HISTORY_WINDOW_ENTRIES``)
and sends the same prompt as a whole read would; an edit far back, or a rolling summary
older than that part, reads the whole cache (real stack, scripted model)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chats import cache as chat_cache
from pipeline import postprocess as post
from pipeline import state
from pipeline import turn as turn_module
from pipeline.ids import new_id

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

TURNS = 40  # 80 cached messages: more than the 64 a turn reads


async def _send(client: Any, chat: Any, content: str, **extra: Any) -> tuple[str, str]:
    """One turn; ``(question id, answer id)``."""
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content=content, **extra
    )
    frames = await client.until("postprocess.done")
    accepted = next(f for f in frames if f["type"] == "message.accepted")
    return str(accepted["message_id"]), str(accepted["assistant_message_id"])


@pytest.fixture(autouse=True)
def _no_rate_limit(settings: Any) -> None:
    settings.PIPELINE_TURNS_PER_MINUTE = 1000


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int | None, int, int]]:
    """Every AI cache read of the turn: ``(newest asked, skipped, messages read)``."""
    seen: list[tuple[int | None, int, int]] = []
    real = chat_cache.ai_history_read

    async def recorded(**kwargs: Any) -> chat_cache.CachedHistory:
        cached = await real(**kwargs)
        seen.append((kwargs.get("newest"), cached.skipped, len(cached.messages or [])))
        return cached

    monkeypatch.setattr(chat_cache, "ai_history_read", recorded)
    return seen


async def _long_chat(ws_client: Any, chat_factory: Any, user: Any, instance: Any, llm_script: Any):
    # Only main calls to script: no model pre-processing (title) or post-processing.
    instance.follow_ups_enabled = False
    instance.model_preprocessing_enabled = False
    await sync_to_async(instance.save)()
    turn_module.instance_context_forget()
    chat = await sync_to_async(chat_factory)(user)
    client = await ws_client(user)
    ids = []
    for n in range(TURNS):
        llm_script.reply(text=f"a{n}", model="standard")
        ids.append(await _send(client, chat, f"q{n}"))
    llm_script.requests.clear()
    return chat, client, ids


def _sent(llm_script: Any) -> list[str]:
    """The main call's history and question, as texts (its system message left out)."""
    return [str(m["content"]) for m in llm_script.requests[0].messages[1:]]


async def test_a_long_chat_reads_the_newest_entries_and_sends_the_same_prompt(
    ws_client, chat_factory, user, instance, llm_script, reads
):
    chat, client, _ = await _long_chat(ws_client, chat_factory, user, instance, llm_script)
    reads.clear()
    llm_script.reply(text="a40", model="standard")

    await _send(client, chat, "q40")

    assert reads == [(turn_module.HISTORY_WINDOW_ENTRIES, 2 * TURNS - 64, 64)]
    # The 15 newest messages (a32 to a39) less the answer at their start, then the question.
    expected = [text for n in range(33, TURNS) for text in (f"q{n}", f"a{n}")]
    assert _sent(llm_script) == [*expected, "q40"]


async def test_an_edit_far_back_reads_the_whole_cache(
    ws_client, chat_factory, user, instance, llm_script, reads
):
    chat, client, ids = await _long_chat(ws_client, chat_factory, user, instance, llm_script)
    reads.clear()
    llm_script.reply(text="a2 again", model="standard")

    await _send(client, chat, "q2, edited", parent_id=ids[1][1])

    # The window (the newest 64 entries) does not reach the branch's start: a whole read.
    assert reads == [(64, 2 * TURNS - 64, 64), (None, 0, 2 * TURNS)]
    assert _sent(llm_script) == ["q0", "a0", "q1", "a1", "q2, edited"]


ASK = '{"follow_ups": [], "topic_changed": false, "summary": "Summary after q40."}'


async def _turn_after_summary(
    client: Any, chat: Any, user: Any, instance: Any, llm_script: Any, monkeypatch: Any, covers: str
) -> list[list[str]]:
    """One more turn after a rolling summary covering ``covers``, with post-processing on
    (its fast calls scripted: a block summary when a gap is folded, then the per-turn
    call); the conversations post-processing was given."""
    await state.chat_notes_save(
        user_id=user.pk,
        chat_id=chat.pk,
        notes=state.ChatNotes(summary="Summary.", summary_covers=covers, language="en"),
    )
    instance.follow_ups_enabled = True
    instance.memory_enabled = False
    await sync_to_async(instance.save)()
    turn_module.instance_context_forget()
    given: list[list[str]] = []
    real = post.postprocess

    async def postprocess(**kwargs: Any) -> post.Postprocessed:
        given.append([str(m["content"]) for m in kwargs["conversation"]])
        return await real(**kwargs)

    monkeypatch.setattr(post, "postprocess", postprocess)
    llm_script.reply(text="a40", model="standard")
    await _send(client, chat, "q40")
    return given


@pytest.mark.parametrize(
    ("covered", "whole_read", "first_given", "folded"),
    [
        # A summary up to a4: the turn used the window; post-processing read the whole
        # cache (the new exchange in it by then), as the summary has to fold in what
        # follows a4 (q5 to a7 are outside the window).
        (4, [(None, 0, 2 * TURNS + 2)], 0, range(5, 38)),
        # A summary up to a38, inside the window: no second read, nothing to fold.
        (38, [], 8, None),
    ],
)
async def test_post_processing_reads_the_whole_branch_only_for_an_older_summary(
    ws_client,
    chat_factory,
    user,
    instance,
    llm_script,
    reads,
    monkeypatch,
    covered,
    whole_read,
    first_given,
    folded,
):
    chat, client, ids = await _long_chat(ws_client, chat_factory, user, instance, llm_script)
    reads.clear()
    if folded is not None:
        llm_script.reply(text="Block summary.", model="fast")
    llm_script.reply(text=ASK, model="fast")

    given = await _turn_after_summary(
        client, chat, user, instance, llm_script, monkeypatch, covers=ids[covered][1]
    )

    assert reads == [(64, 2 * TURNS - 64, 64), *whole_read]
    assert given == [[text for n in range(first_given, TURNS + 1) for text in (f"q{n}", f"a{n}")]]
    fast = [r for r in llm_script.requests if r.model == "fast"]
    if folded is not None:
        # The fold got every uncovered message the per-turn call does not see, q5 first.
        block = fast[0].messages[1]["content"].split("\n\n")
        assert block == [line for n in folded for line in (f"user: q{n}", f"assistant: a{n}")]
    assert len(fast) == (2 if folded is not None else 1)
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.summary == "Summary after q40."
