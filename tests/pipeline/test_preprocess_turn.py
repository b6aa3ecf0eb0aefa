"""Pre-processing through a real turn over /ws/chat/ (PostgreSQL, Redis, OpenBao real, the
model scripted at the LiteLLM boundary) and the model-based tool preselection with the
scripted fake: each tool's reason in ``preprocess.done``, the offer-all setting, the
fast tier's picks merged with the local ones (and ignored when that call fails or is
late), and the heuristic title when the title call fails."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from chats.models import Message
from instances.models import Instance
from pipeline import preprocess as pre
from pipeline.ids import new_id

SAFE = '{"harmful": 0, "misuse": 0}'
TITLE = '{"title": "Multiplying", "icon": "math", "category": "math", "tags": []}'
POST = '{"follow_ups": [], "topic_changed": false, "summary": ""}'
CANDIDATES = (
    pre.ToolCandidate("calculator", "Evaluate an arithmetic expression exactly."),
    pre.ToolCandidate("weather", "Current weather at a place."),
    pre.ToolCandidate("web_search", "Search the web for current information."),
)


@pytest.fixture(scope="module", autouse=True)
def _embedding_warm() -> None:
    # A first English message without a trigger is embedded: the model loads once here,
    # not inside a turn the client waits 5 s for.
    pre.warm_up()


@pytest.fixture
def user(owner: Any) -> Any:
    from openmates import vault

    vault.ensure_key(vault.user_key_name(owner.pk))
    return owner


@pytest.fixture
def chat(chat_factory: Any, user: Any) -> Any:
    return chat_factory(user)


async def _first_turn(ws_client: Any, user: Any, chat: Any, content: str) -> list[dict[str, Any]]:
    client = await ws_client(user)
    await client.send(type="message.send", chat_id=chat.pk, message_id=new_id(), content=content)
    frames: list[dict[str, Any]] = await client.until("postprocess.done")
    return frames


def _preprocess_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "preprocess.done"]


async def _instance_set(instance: Any, **values: Any) -> None:
    from pipeline.turn import instance_context_forget

    for name, value in values.items():
        setattr(instance, name, value)
    await sync_to_async(instance.save)()
    instance_context_forget()


# --- the reasons in preprocess.done ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_preprocess_done_gives_the_reason_of_each_tool(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="391.", model="standard")
    llm_script.reply(text=POST, model="fast")
    frames = await _first_turn(ws_client, user, chat, "What is 17 * 23?")
    first, title = _preprocess_frames(frames)
    assert first["tools"] == ["calculator"]
    assert first["tool_reasons"] == {"calculator": "rule: '17 * 23'"}
    assert title["reason"] == "title"
    assert "tool_reasons" not in title
    main = next(r for r in llm_script.requests if r.model == "standard")
    sent_tools = main.params.get("tools") or []
    assert [t["function"]["name"] for t in sent_tools] == ["calculator"]
    # Kept with the answer, for its badge after a reload and on other devices.
    done = next(f for f in frames if f["type"] == "stream.done")
    answer = await Message.objects.aget(pk=done["message_id"])
    assert answer.tools_offered == ["calculator"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_base_model_is_offered_no_tools_and_none_is_shown_as_offered(
    ws_client: Any, chat: Any, user: Any, instance: Instance, llm_wire: Any
) -> None:
    from openmates import llm
    from pipeline.turn import instance_context_forget
    from tests.llm_fake import WireReply, sse_body

    instance.tier_map = {
        t: [{"model": "text-completion-openai/gemma-3-270m", "api_base": llm_wire.api_base}]
        for t in llm.TIERS
    }
    await sync_to_async(instance.save)()
    instance_context_forget()
    chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "g"}
    choice = {"index": 0, "text": " 391.", "finish_reason": "stop"}
    llm_wire.queue(WireReply([sse_body([{**chunk, "choices": [choice]}])]))

    frames = await _first_turn(ws_client, user, chat, "What is 17 * 23?")

    first = _preprocess_frames(frames)[0]
    assert (first["tools"], first["tool_reasons"]) == ([], {})
    (sent,) = llm_wire.requests
    assert "tools" not in sent["body"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_message_needing_no_tool_has_no_reasons(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="A poem.", model="standard")
    llm_script.reply(text=POST, model="fast")
    frames = await _first_turn(ws_client, user, chat, "Write a short poem about autumn leaves")
    first = _preprocess_frames(frames)[0]
    assert (first["tools"], first["tool_reasons"]) == ([], {})


# --- offer all ---------------------------------------------------------------------------------


def test_the_instance_setting_offers_every_tool_of_a_small_instance() -> None:
    def tools(instance: Instance, **kwargs: Any) -> dict[str, str]:
        decided = pre.preprocess(
            content="Write a short poem about autumn leaves",
            instance=instance,
            candidates=CANDIDATES,
            role="member",
            previous_assistant=None,
            mate_categories=(),
            **kwargs,
        )
        return dict(zip(decided.tools, decided.tool_reasons, strict=True))

    assert tools(Instance(slug="a", name="A")) == {}
    offered = tools(Instance(slug="b", name="B", tools_offer_all_up_to=3))
    assert offered == dict.fromkeys(
        ("calculator", "weather", "web_search"), "offered: the instance has only 3 tools"
    )
    assert tools(Instance(slug="c", name="C", tools_offer_all_up_to=2)) == {}
    # The argument, when given, wins over the instance's setting.
    assert (
        tools(Instance(slug="d", name="D", tools_offer_all_up_to=3), offer_all_tools_up_to=0) == {}
    )


def test_offer_all_is_bounded_by_the_most_tools_a_message_gets() -> None:
    instance = Instance(slug="big", name="Big", tools_offer_all_up_to=pre.MAX_TOOLS + 1)
    with pytest.raises(ValidationError) as raised:
        instance.clean_fields(exclude=["tier_map"])
    assert "tools_offer_all_up_to" in raised.value.message_dict


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_offer_all_reaches_the_turn_and_its_reasons(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    from skills.selectors import enabled_tools_for_instance

    enabled = [t.name for t in await sync_to_async(enabled_tools_for_instance)(instance)]
    assert 1 <= len(enabled) <= pre.MAX_TOOLS
    await _instance_set(instance, tools_offer_all_up_to=pre.MAX_TOOLS)
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="A poem.", model="standard")
    llm_script.reply(text=POST, model="fast")
    frames = await _first_turn(ws_client, user, chat, "Write a short poem about autumn leaves")
    first = _preprocess_frames(frames)[0]
    assert sorted(first["tools"]) == sorted(enabled)
    assert set(first["tool_reasons"].values()) == {
        f"offered: the instance has only {len(enabled)} tools"
    }


# --- model-based preselection ----------------------------------------------------------------


def _local(text: str) -> pre.Preprocessed:
    return pre.preprocess(
        content=text,
        instance=Instance(slug="m", name="M"),
        candidates=CANDIDATES,
        role="member",
        previous_assistant=None,
        mate_categories=(),
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_the_models_picks_are_added_after_the_local_ones(
    instance: Any, llm_script: Any
) -> None:
    local = _local("What is 17 * 23, and is it raining in Oslo?")
    assert local.tools[0] == "calculator"
    llm_script.reply(
        text='{"tools": ["web_search", "calculator", "no_such_tool", "web_search"]}', model="fast"
    )
    merged = await pre.amodel_tools_merge(
        local, candidates=CANDIDATES, instance=instance, chat_id="c1"
    )
    reasons = dict(zip(merged.tools, merged.tool_reasons, strict=True))
    assert reasons["calculator"] == "rule: '17 * 23'"
    assert reasons["web_search"] == pre.MODEL_TOOLS_REASON
    assert merged.tools[-1] == "web_search"
    assert "no_such_tool" not in reasons
    (request,) = llm_script.requests
    schema = request.params["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["tools"]["items"]["enum"] == [c.name for c in CANDIDATES]
    assert "web_search: Search the web" in request.messages[0]["content"]
    assert request.messages[1]["content"] == local.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("reply", "logged"),
    [
        ({"error": 400}, "the call failed"),
        ({"text": '{"answer": "calculator"}'}, "no tools list in the answer"),
        ({"text": '{"tools": ["web_search"]}', "delay_s": 0.5}, "no answer within 0.2 s"),
    ],
)
async def test_a_failed_or_late_model_preselection_keeps_the_local_choice(
    instance: Any,
    llm_script: Any,
    caplog: pytest.LogCaptureFixture,
    reply: dict[str, Any],
    logged: str,
) -> None:
    local = _local("What is 17 * 23?")
    llm_script.reply(model="fast", **reply)
    # Only the late answer is about the deadline: the others get time enough on a busy
    # machine to fail for their own reason.
    timeout_s = 0.2 if "delay_s" in reply else 20.0
    with caplog.at_level(logging.WARNING, logger="pipeline.preprocess"):
        merged = await pre.amodel_tools_merge(
            local, candidates=CANDIDATES, instance=instance, chat_id="c1", timeout_s=timeout_s
        )
    assert merged == local
    assert f"local tool choice only (model preselection: {logged}" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_model_preselection_in_a_first_turn(
    ws_client: Any, chat: Any, user: Any, instance: Any, llm_script: Any
) -> None:
    await _instance_set(instance, model_tool_preselection=True)
    # The safety check and the preselection run concurrently, so either may take either
    # of the first two fast answers: each answer serves both schemas.
    both = '{"harmful": 0, "misuse": 0, "tools": ["calculator"]}'
    llm_script.reply(text=both, model="fast")
    llm_script.reply(text=both, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Here is a sum.", model="standard")
    llm_script.reply(text=POST, model="fast")
    frames = await _first_turn(ws_client, user, chat, "Help me plan the shopping budget")
    first = _preprocess_frames(frames)[0]
    assert first["tool_reasons"]["calculator"] == pre.MODEL_TOOLS_REASON
    main = next(r for r in llm_script.requests if r.model == "standard")
    sent_tools = main.params.get("tools") or []
    assert "calculator" in [t["function"]["name"] for t in sent_tools]
    stages = sorted(r.messages[0]["content"][:20] for r in llm_script.requests[:2])
    assert stages == ["Pick the tools an as", "Rate the user's mess"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_without_the_setting_no_model_preselection_runs(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=TITLE, model="fast")
    llm_script.reply(text="Fine.", model="standard")
    llm_script.reply(text=POST, model="fast")
    await _first_turn(ws_client, user, chat, "Help me plan the shopping budget")
    systems = [str(r.messages[0]["content"]) for r in llm_script.requests]
    assert not any(s.startswith("Pick the tools") for s in systems)
    assert len(llm_script.requests) == 4


# --- the title fallback ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_first_turn_whose_title_call_fails_gets_a_plain_heuristic_title(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    from pipeline import state

    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(error=400, model="fast")  # the title call: not retried
    llm_script.reply(text="Gern.", model="standard")
    llm_script.reply(text=POST, model="fast")
    content = "## Wie plane ich **eine `Reise`** nach [Lissabon](https://example.com)?"
    frames = await _first_turn(ws_client, user, chat, content)
    first, title = _preprocess_frames(frames)
    assert first["language"] == "de"
    assert "title" not in first
    assert title["reason"] == "title"
    assert title["title"] == "Wie plane ich eine Reise nach Lissabon"
    assert title["title"] != pre.NEW_CHAT
    assert not any(mark in title["title"] for mark in "#*`[]()")
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.title == title["title"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_title_call_still_running_after_the_wait_gives_the_heuristic_title(
    ws_client: Any,
    chat: Any,
    user: Any,
    llm_script: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline import state, turn

    monkeypatch.setattr(turn, "TITLE_WAIT_S", 0.2)
    llm_script.reply(text=SAFE, model="fast")
    # The title call hangs far past the wait (the test's own timeout is shorter).
    llm_script.reply(text=TITLE, model="fast", delay_s=300.0)
    llm_script.reply(text="Claro.", model="standard")
    llm_script.reply(text=POST, model="fast")
    with caplog.at_level(logging.WARNING, logger="pipeline.preprocess"):
        frames = await _first_turn(
            ws_client, user, chat, "¿Cómo preparo una **paella** valenciana?"
        )
    first, title = _preprocess_frames(frames)
    assert "title" not in first
    assert title["reason"] == "title"
    assert title["title"] == "Cómo preparo una paella valenciana"
    assert "did not end within 0.2 s of the reply" in caplog.text
    notes = await state.chat_notes_load(user_id=user.pk, chat_id=chat.pk)
    assert notes.title == title["title"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_title_call_failing_outside_the_gateway_gives_the_heuristic_title(
    ws_client: Any,
    chat: Any,
    user: Any,
    llm_script: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openmates import llm

    complete = llm.complete

    async def failing_title(**kwargs: Any) -> Any:
        # Not an LLMError: what a failing secrets read or a bug in between raises.
        if kwargs.get("stage") == "title":
            raise RuntimeError("the secret store is sealed")
        return await complete(**kwargs)

    monkeypatch.setattr(llm, "complete", failing_title)
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text="Volontiers.", model="standard")
    llm_script.reply(text=POST, model="fast")
    with caplog.at_level(logging.WARNING, logger="pipeline.preprocess"):
        frames = await _first_turn(ws_client, user, chat, "Comment réparer un vélo crevé ?")
    assert frames[-1]["type"] == "postprocess.done"
    done = next(f for f in frames if f["type"] == "stream.done")
    assert done["status"] == "done"
    title = _preprocess_frames(frames)[1]
    assert title["title"] == "Comment réparer un vélo crevé"
    assert "RuntimeError('the secret store is sealed')" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_titles_and_follow_ups_lose_bidi_overrides_and_control_characters(
    ws_client: Any, chat: Any, user: Any, llm_script: Any
) -> None:
    hostile_title = (
        '{"title": "\\u202eexe.txt **Trip** plan\\u0007", "icon": "\\u202emap", '
        '"category": "travel\\u200b", "tags": ["\\u2066x\\u2069", "\\u200b"]}'
    )
    hostile_post = (
        '{"follow_ups": ["\\u202eWhat about\\u200b trains?", " \\u200e ", "Hotels\\u001b?"], '
        '"topic_changed": false, "summary": ""}'
    )
    llm_script.reply(text=SAFE, model="fast")
    llm_script.reply(text=hostile_title, model="fast")
    llm_script.reply(text="Sure.", model="standard")
    llm_script.reply(text=hostile_post, model="fast")

    frames = await _first_turn(ws_client, user, chat, "Plan a trip to Lisbon for me")

    titled = [f for f in _preprocess_frames(frames) if f.get("title")]
    assert [(f["title"], f["icon"]) for f in titled] == [("exe.txt Trip plan", "map")]
    done = next(f for f in frames if f["type"] == "postprocess.done")
    assert done["follow_ups"] == ["What about trains?", "Hotels?"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\u202eexe.txt", "exe.txt"),
        ("a\u2066b\u2069c\u200fd", "abcd"),
        ("tab\there\nand\x00nul\x1b", "tab here andnul"),
        ("\U0001f469\u200d\U0001f4bb coder", "\U0001f469\u200d\U0001f4bb coder"),  # ZWJ emoji kept
        (
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        ),
    ],
)
def test_display_line_keeps_what_a_script_needs_and_drops_what_hides_or_reorders(
    text: str, shown: str
) -> None:
    assert pre.display_line(text) == shown


def test_a_heuristic_title_drops_a_bidi_override_of_the_message() -> None:
    assert (
        pre.heuristic_title("\u202eWie spät ist es in Tokio?").title == "Wie spät ist es in Tokio"
    )
