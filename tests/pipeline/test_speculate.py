"""Pre-processing beside the accept call (``pipeline.speculate``): a follow-up's decision
is made once, on the chat's last accepted instance and role, and made again when what
the accept finds differs (real PostgreSQL, Redis and OpenBao; the model scripted)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from instances.models import Instance, InstanceMember
from pipeline import preprocess as pre
from pipeline import speculate
from pipeline.ids import new_id

CANDIDATES = (pre.ToolCandidate("calculator", "Evaluate an arithmetic expression exactly."),)


def _inputs(**changes: Any) -> speculate.PreprocessInputs:
    values: dict[str, Any] = {
        "content": "Can you explain this step by step and compare both designs?",
        "instance": Instance(name="i", slug="i", default_language="en"),
        "candidates": CANDIDATES,
        "mate_categories": ["general"],
        "role": "admin",
        "previous_assistant": "An earlier answer.",
        "requested_tier": "heavy",
        "requested_tools": None,
        "fallback_language": "de",
    } | changes
    return speculate.PreprocessInputs.of(**values)


def test_a_guess_is_per_user_and_chat_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    speculate.guesses_forget()
    monkeypatch.setattr(speculate, "GUESSES_KEPT", 2)
    instance = Instance(pk=7, name="i", slug="i")
    speculate.guess_keep(user_id=1, chat_id="a", instance=instance, role="admin")
    speculate.guess_keep(user_id=1, chat_id="b", instance=instance, role="member")
    speculate.guess_keep(user_id=2, chat_id="b", instance=instance, role="owner")

    assert speculate.guess_for(user_id=1, chat_id="a") is None  # the oldest is dropped
    assert speculate.guess_for(user_id=1, chat_id="b") == speculate.Guess(instance, "member")
    assert speculate.guess_for(user_id=2, chat_id="b") == speculate.Guess(instance, "owner")
    assert speculate.guess_for(user_id=3, chat_id="b") is None
    speculate.guesses_forget()


def test_the_speculative_decision_is_used_only_on_equal_inputs() -> None:
    guessed = _inputs()
    speculation = speculate.Speculation(guessed, guessed.run(Instance(name="i", slug="i")))
    instance = Instance(name="i", slug="i", default_language="en")

    same = speculate.preprocessed(_inputs(), instance, speculation)
    demoted = speculate.preprocessed(_inputs(role="member"), instance, speculation)
    other_chat_language = speculate.preprocessed(
        _inputs(fallback_language="fr"), instance, speculation
    )
    other_settings = speculate.preprocessed(
        _inputs(instance=Instance(name="i", slug="i", default_language="fr")),
        instance,
        speculation,
    )

    assert same is speculation.decided
    assert (speculation.decided.tier, speculation.decided.reason) == (
        "heavy",
        "requested by the client",
    )
    assert demoted is not speculation.decided
    assert demoted.tier != "heavy"  # a member may not ask for the heavy tier
    assert other_chat_language is not speculation.decided
    assert other_settings is not speculation.decided
    assert speculate.previous_answer(
        [{"role": "assistant", "content": "one"}, {"role": "user", "content": "q"}]
    ) == ("one")
    assert speculate.previous_answer(None) is None


async def _turn(client: Any, chat: Any, llm_script: Any, content: str) -> dict[str, Any]:
    llm_script.reply(text="Fine.")
    await client.send(
        type="message.send",
        chat_id=chat.pk,
        message_id=new_id(),
        content=content,
        overrides={"tier": "heavy"},
    )
    frames = await client.until("stream.done")
    assert [f for f in frames if f["type"] == "error"] == []
    done: dict[str, Any] = next(f for f in frames if f["type"] == "preprocess.done")
    return done


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_a_follow_up_is_preprocessed_once_and_again_when_the_role_changed(
    ws_client: Any,
    chat_factory: Any,
    instance: Any,
    keyed_user_factory: Any,
    llm_script: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    speculate.guesses_forget()
    await Instance.objects.filter(pk=instance.pk).aupdate(
        model_preprocessing_enabled=False, follow_ups_enabled=False, memory_enabled=False
    )
    user = await sync_to_async(keyed_user_factory)("speculator")
    await InstanceMember.objects.acreate(instance=instance, user=user, role="admin")
    chat = await sync_to_async(chat_factory)(user)
    runs: list[str] = []
    real = pre.preprocess

    def counted(**kwargs: Any) -> pre.Preprocessed:
        runs.append(kwargs["role"])
        return real(**kwargs)

    monkeypatch.setattr(pre, "preprocess", counted)
    client = await ws_client(user)

    first = await _turn(client, chat, llm_script, "Compare these two designs step by step")
    assert (first["tier"], runs) == ("heavy", ["admin"])  # no guess yet: run once
    second = await _turn(client, chat, llm_script, "And which one is cheaper to run?")
    assert (second["tier"], runs) == ("heavy", ["admin", "admin"])  # beside the accept only
    await InstanceMember.objects.filter(user=user).aupdate(role="member")
    third = await _turn(client, chat, llm_script, "Explain the second one again")
    # The guess (admin) was wrong: decided again for the member, who gets no heavy tier.
    assert runs == ["admin", "admin", "admin", "member"]
    assert third["tier"] != "heavy"
    speculate.guesses_forget()
