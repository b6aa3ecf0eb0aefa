"""Long histories: the recent history is trimmed to the tier's context, and older messages
are folded into the rolling summary after the turn (parallel block summaries, then one
merge), tracked by a marker so nothing is folded twice (real stack, scripted model)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from pipeline import postprocess as post
from pipeline import prompts, state
from pipeline.ids import new_id
from pipeline.turn import instance_context_forget

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

ASK = '{{"follow_ups": ["More?"], "topic_changed": false, "summary": "{summary}"}}'
SUMMARY_QUESTION = "What have we discussed so far?"
FILLER = " ".join(f"word{n}" for n in range(200))  # 1,489 ASCII characters


def _history(count: int, *, filler: str = FILLER) -> list[dict[str, str]]:
    """``count`` alternating user/assistant messages, oldest first (~375 tokens each)."""
    roles = ("user", "assistant")
    return [
        {"message_id": new_id(), "role": roles[n % 2], "content": f"message {n}: {filler}"}
        for n in range(count)
    ]


def _line(message: dict[str, str]) -> str:
    return f"{message['role']}: {message['content']}"


def _number(line: str) -> int:
    """The message number in a transcript line ``"<role>: message <n>: ..."``."""
    return int(line.split(" ")[2].rstrip(":"))


def _fast(llm_script: Any) -> list[Any]:
    return [r for r in llm_script.requests if r.model == "fast"]


async def _send(client: Any, chat: Any, content: str, **extra: Any) -> list[dict[str, Any]]:
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content=content, **extra
    )
    return await client.until("postprocess.done")


def test_token_estimate_counts_ascii_by_four_and_other_characters_as_one() -> None:
    assert prompts.estimate_tokens("") == 0
    assert prompts.estimate_tokens("abcd" * 10) == 10
    assert prompts.estimate_tokens("abcde") == 2
    assert prompts.estimate_tokens("日本語のテキスト") == 8
    assert prompts.estimate_tokens("Grüße") == 1 + 2  # 4 ASCII (rounded up) + 2 others
    assert prompts.estimate_message_tokens([{"role": "user", "content": "abcd"}]) == 1 + 4


def test_history_budget_leaves_the_answer_reserve_and_the_fixed_parts() -> None:
    fixed = [{"role": "system", "content": "x" * 400}, {"role": "user", "content": "y" * 40}]
    assert prompts.history_budget_tokens(context_tokens=8192, fixed_messages=fixed) == (
        8192 - 2048 - (100 + 4) - (10 + 4)
    )
    assert prompts.history_budget_tokens(context_tokens=200_000, fixed_messages=[]) == 195_904
    assert prompts.history_budget_tokens(context_tokens=100, fixed_messages=fixed) == 0


def test_summary_gap_is_what_neither_the_summary_nor_the_per_turn_call_covers() -> None:
    conversation = _history(12)
    ids = [m["message_id"] for m in conversation]
    assert post.summary_gap(conversation, None) == conversation[:6]
    assert post.summary_gap(conversation, ids[3]) == conversation[4:6]
    assert post.summary_gap(conversation, ids[5]) == []
    assert post.summary_gap(conversation, ids[10]) == []
    assert post.summary_gap(conversation, "not-in-this-chat") == conversation[:6]
    assert post.summary_gap(conversation[:6], None) == []


def test_text_blocks_keep_order_fill_each_block_and_cut_an_oversized_text() -> None:
    texts = ["a" * 40, "b" * 40, "c" * 40, "d" * 400]  # 10, 10, 10 and 100 tokens
    blocks = post.text_blocks(texts, 25)
    assert [len(b) for b in blocks] == [2, 1, 1]
    assert blocks[0] == texts[:2]
    assert blocks[1] == texts[2:3]
    cut = blocks[2][0]
    assert cut.startswith("d" * 40)
    assert cut.endswith("…")
    assert prompts.estimate_tokens(cut) <= 23


async def test_gather_bounded_runs_at_most_the_limit_at_once_and_keeps_the_order() -> None:
    running = 0
    peak = 0
    four_running = asyncio.Event()
    release = asyncio.Event()

    async def call(n: int) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 4:
            four_running.set()
        await release.wait()
        running -= 1
        return f"summary {n}"

    calls = [lambda n=n: call(n) for n in range(10)]
    task = asyncio.create_task(post.gather_bounded(calls, limit=4))
    await four_running.wait()
    for _ in range(20):  # let any fifth call start if the bound did not hold
        await asyncio.sleep(0)
    assert running == 4
    release.set()
    assert await task == [f"summary {n}" for n in range(10)]
    assert peak == 4


async def test_long_client_history_is_trimmed_then_folded_in_parallel_blocks_and_merged(
    ws_client, chat_factory, user, llm_script
):
    chat = await sync_to_async(chat_factory)(user)
    history = _history(60)
    block_summaries = [f"Block summary {n}: " + "b" * 900 for n in range(4)]
    merged = "Merged: the user and the assistant discussed sixty numbered messages."
    llm_script.reply(text="First answer.", model="standard")
    for text in block_summaries:
        llm_script.reply(text=text, model="fast")
    llm_script.reply(text=merged, model="fast")
    llm_script.reply(text=ASK.format(summary="After turn one."), model="fast")
    client = await ws_client(user)

    frames = await _send(client, chat, "Which colour did we pick?", history=history)

    # The main model got the 15 newest messages, less the assistant one at their start.
    main = llm_script.requests[0]
    assert main.model == "standard"
    assert main.messages[0]["role"] == "system"
    assert main.messages[1:-1] == [
        {"role": m["role"], "content": m["content"]} for m in history[46:]
    ]
    assert main.messages[-1] == {"role": "user", "content": "Which colour did we pick?"}
    assert prompts.estimate_message_tokens(main.messages) <= 8192 - 2048
    # The 56 messages the per-turn call does not see were split into 4 blocks, each as
    # full as the fast context allows, summarised by parallel calls.
    fast = _fast(llm_script)
    assert len(fast) == 4 + 1 + 1
    block_instruction = post.BLOCK_INSTRUCTION.format(language="English")
    blocks = []
    for request in fast[:4]:
        assert request.messages[0] == {"role": "system", "content": block_instruction}
        blocks.append(request.messages[1]["content"].split("\n\n"))
    blocks.sort(key=lambda lines: _number(lines[0]))
    assert [line for block in blocks for line in block] == [_line(m) for m in history[:56]]
    budget = prompts.history_budget_tokens(
        context_tokens=8192,
        fixed_messages=[{"role": "system", "content": block_instruction}, {"role": "user"}],
    )
    for block, following in itertools.pairwise(blocks):
        size = prompts.estimate_tokens("\n\n".join(block))
        assert size <= budget < size + prompts.estimate_tokens(following[0]) + 1
    assert [len(block) for block in blocks] == [16, 16, 16, 8]
    # The block summaries (too long to concatenate) were merged by one call, oldest first.
    # The n-th block call took the n-th scripted reply, whichever block it carried.
    summary_of = {
        _number(request.messages[1]["content"]): block_summaries[n]
        for n, request in enumerate(fast[:4])
    }
    ordered = [summary_of[_number(block[0])] for block in blocks]
    assert fast[4].messages == [
        {"role": "system", "content": post.MERGE_INSTRUCTION.format(language="English")},
        {
            "role": "user",
            "content": "\n\n".join(f"Part {n}:\n{s}" for n, s in enumerate(ordered, 1)),
        },
    ]
    # The per-turn call extended the merged summary with the last six messages.
    assert f"previous summary: {merged}" in fast[5].messages[0]["content"]
    assert fast[5].messages[1]["content"].startswith(_line(history[56])[:40])
    done = frames[-1]
    assert (done["summary"], done["follow_ups"]) == ("After turn one.", ["More?"])
    assistant_id = next(f for f in frames if f["type"] == "message.accepted")[
        "assistant_message_id"
    ]
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert (notes.summary, notes.summary_covers) == ("After turn one.", assistant_id)

    # The next turn starts from the summary and folds nothing: the marker moved.
    llm_script.requests.clear()
    llm_script.reply(text="Second answer.", model="standard")
    llm_script.reply(text=ASK.format(summary="After turn two."), model="fast")
    await _send(client, chat, "And the size?")
    assert [r.model for r in llm_script.requests] == ["standard", "fast"]
    sent = llm_script.requests[0].messages
    assert sent[1:3] == [
        {"role": "user", "content": SUMMARY_QUESTION},
        {"role": "assistant", "content": "After turn one."},
    ]
    assert sent[-2:] == [
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "And the size?"},
    ]
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.summary == "After turn two."


async def test_a_tiny_context_tier_trims_the_history_harder(
    ws_client, chat_factory, user, instance, llm_script, settings
):
    instance.follow_ups_enabled = False  # no post-processing calls: only the main one counts
    await sync_to_async(instance.save)()
    history = _history(10)
    counts = {}
    client = await ws_client(user)
    for context in (8192, 2048):
        settings.LLM_FALLBACK_CONTEXT_TOKENS = context  # the scripted models are unknown
        instance_context_forget()
        chat = await sync_to_async(chat_factory)(user)
        llm_script.requests.clear()
        llm_script.reply(text="Answer.", model="standard")
        await _send(client, chat, "Which colour did we pick?", history=history)
        assert [r.model for r in llm_script.requests] == ["standard"]
        sent = llm_script.requests[0].messages
        counts[context] = len(sent) - 2
        assert sent[1:-1] == [
            {"role": m["role"], "content": m["content"]} for m in history[-counts[context] :]
        ]
        assert prompts.estimate_message_tokens(sent) <= context - context // 4
    assert counts == {8192: 10, 2048: 2}


async def test_a_failed_fold_keeps_the_old_marker_and_the_next_turn_folds_again(
    ws_client, chat_factory, user, llm_script
):
    chat = await sync_to_async(chat_factory)(user)
    history = _history(8, filler="short")
    llm_script.reply(text="First answer.", model="standard")
    llm_script.reply(error=400, model="fast")  # the one block call fails
    llm_script.reply(text=ASK.format(summary="Not trusted."), model="fast")
    client = await ws_client(user)

    frames = await _send(client, chat, "Which colour did we pick?", history=history)

    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["status"] == "done"
    post_done = frames[-1]
    assert post_done["follow_ups"] == ["More?"]
    assert "summary" not in post_done
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert (notes.summary, notes.summary_covers) == (None, None)

    llm_script.requests.clear()
    llm_script.reply(text="Second answer.", model="standard")
    llm_script.reply(text="Folded.", model="fast")
    llm_script.reply(text=ASK.format(summary="Everything so far."), model="fast")
    await _send(client, chat, "And the size?")

    fast = _fast(llm_script)
    # Turn one's four uncovered messages plus two more now lie outside the last six.
    assert fast[0].messages[1]["content"] == "\n\n".join(_line(m) for m in history[:6])
    assert "previous summary: Folded." in fast[1].messages[0]["content"]
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.summary == "Everything so far."


async def test_the_per_turn_call_fits_a_small_fast_context(
    ws_client, chat_factory, user, llm_script, settings
):
    settings.LLM_FALLBACK_CONTEXT_TOKENS = 2048  # every scripted tier
    chat = await sync_to_async(chat_factory)(user)
    history = _history(2)
    llm_script.reply(text="Answer. " + FILLER, model="standard")
    llm_script.reply(text=ASK.format(summary="Short."), model="fast")
    client = await ws_client(user)

    await _send(client, chat, "Tell me more. " + FILLER, history=history)

    ask = _fast(llm_script)[0]
    lines = ask.messages[1]["content"].split("\n\n")
    assert [line.split(":", 1)[0] for line in lines] == ["user", "assistant"] * 2
    assert lines[0].startswith("user: message 0: word0 word1")
    assert all(line.endswith("…") for line in lines)  # each cut to its share
    assert prompts.estimate_message_tokens(ask.messages) <= 2048 - 512
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.summary == "Short."


async def test_a_reply_with_no_text_is_not_sent_as_an_empty_assistant_message(
    ws_client, chat_factory, user, instance, llm_script
):
    instance.model_preprocessing_enabled = False
    instance.follow_ups_enabled = False
    await sync_to_async(instance.save)()
    instance_context_forget()
    chat = await sync_to_async(chat_factory)(user)
    llm_script.reply(text="", model="standard")  # a reply that produced no text
    llm_script.reply(
        text=" ",
        tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "2 + 2"}}],
        model="standard",
    )
    llm_script.reply(text="4.", model="standard")
    client = await ws_client(user)

    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content="Hm")
    empty = (await client.until("stream.done", wait_s=20))[-1]
    # No text and no tool call is a failure (reason empty_response): retryable, and out of
    # the history like any failed turn.
    assert (empty["content"], empty["status"]) == ("", "failed")
    await client.send(
        type="message.send", chat_id=chat.pk, message_id=new_id(), content="What is 2 + 2?"
    )
    assert (await client.until("stream.done"))[-1]["status"] == "done"

    second, after_tools = llm_script.requests[1], llm_script.requests[2]
    assert [(m["role"], m["content"]) for m in second.messages[1:]] == [
        ("user", "What is 2 + 2?"),
    ]
    # Whitespace before a tool call is no text either: content None beside the tool call.
    assistant = after_tools.messages[-2]
    assert (assistant["role"], assistant.get("content")) == ("assistant", None), assistant
    assert assistant["tool_calls"][0]["function"]["name"] == "calculator"


def test_chat_notes_keep_their_stored_form() -> None:
    stored = {"title": "Trip", "summary": "Planned.", "summary_covers": "m1", "language": "de"}
    assert state.ChatNotes.from_json(stored).to_json() == stored
    assert state.ChatNotes.from_json({"title": "Trip", "summary": 3, "mood": "x"}) == (
        state.ChatNotes(title="Trip")
    )
    assert state.ChatNotes.from_json(None) == state.ChatNotes()
    assert state.ChatNotes(language="fr").to_json() == {"language": "fr"}
