"""Extraction of facts (memories.extraction): the request for the fast tier, the checks of
its JSON answer, and storing the facts once even when a conversation is processed twice."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from memories import extraction, services
from memories.extraction import Fact, extraction_parse, extraction_request
from memories.models import Memory
from openmates import llm

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Ich ziehe nächsten Monat nach Hamburg, mit meiner Frau Jana."},
    {"role": "assistant", "content": "Wie schön! Soll ich Tipps für Hamburg sammeln?"},
    {"role": "user", "content": "Ja, und ich trinke keinen Kaffee, nur Tee."},
]
SCRIPTED = {
    "facts": [
        {"category": "event", "content": "Der Nutzer zieht nächsten Monat nach Hamburg."},
        {"category": "relationship", "content": "Die Frau des Nutzers heißt Jana."},
        {"category": "preference", "content": "Der Nutzer trinkt keinen Kaffee, nur Tee."},
    ]
}


def test_the_request_names_the_language_and_carries_the_conversation() -> None:
    request = extraction_request(CONVERSATION, language="German")

    system, user = request["messages"]
    assert system["role"] == "system"
    assert "sentence about the user in German." in system["content"]
    assert user == {
        "role": "user",
        "content": "user: Ich ziehe nächsten Monat nach Hamburg, mit meiner Frau Jana.\n\n"
        "assistant: Wie schön! Soll ich Tipps für Hamburg sammeln?\n\n"
        "user: Ja, und ich trinke keinen Kaffee, nur Tee.",
    }
    schema = request["response_schema"]
    assert schema["required"] == ["facts"]
    assert schema["properties"]["facts"]["items"]["properties"]["category"]["enum"] == [
        "preference",
        "fact",
        "event",
        "relationship",
        "decision",
        "general",
    ]


def test_the_transcript_keeps_the_newest_messages_that_fit() -> None:
    long = [{"role": "user", "content": f"{n} " + "x" * 3000} for n in range(10)]

    text = extraction_request(long, language="English")["messages"][1]["content"]

    assert len(text) <= extraction.MAX_TRANSCRIPT_CHARS
    assert text.startswith("user: 7 ")
    assert text.rsplit("\n\n", 1)[-1].startswith("user: 9 ")


def test_the_answer_is_parsed_into_facts() -> None:
    assert extraction_parse(SCRIPTED) == [
        Fact("event", "Der Nutzer zieht nächsten Monat nach Hamburg."),
        Fact("relationship", "Die Frau des Nutzers heißt Jana."),
        Fact("preference", "Der Nutzer trinkt keinen Kaffee, nur Tee."),
    ]


def test_bad_items_are_left_out_and_repeats_once() -> None:
    facts = extraction_parse(
        {
            "facts": [
                {"category": "secret", "content": "not a category"},
                {"category": "fact", "content": "   "},
                {"category": "fact", "content": 42},
                {"category": "fact", "content": "x" * 501},
                "not an object",
                {"category": "fact", "content": "Has  a\ndog."},
                {"category": "fact", "content": "has a dog."},
                {"category": "general", "content": "Speaks Welsh."},
            ]
        }
    )

    assert facts == [Fact("fact", "Has a dog."), Fact("general", "Speaks Welsh.")]


@pytest.mark.parametrize("answer", [None, [], "facts", {"facts": "none"}, {"memories": []}])
def test_an_answer_of_another_shape_is_refused(answer: Any) -> None:
    with pytest.raises(extraction.ExtractionFormatError):
        extraction_parse(answer)


def test_at_most_ten_facts_are_taken() -> None:
    many = {"facts": [{"category": "fact", "content": f"Fact {n}."} for n in range(15)]}

    assert len(extraction_parse(many)) == extraction.MAX_FACTS


def test_a_scripted_extraction_run_twice_stores_each_fact_once(
    local_instance: Any, alice: Any, llm_script: Any
) -> None:
    chat = "0190d0c4-1d5a-7c3e-8f00-000000000002"

    def run() -> int:
        llm_script.reply(text=json.dumps(SCRIPTED))
        request = extraction_request(CONVERSATION, language="German")
        answer = async_to_sync(llm.complete)(
            tier="fast", instance=local_instance, stage="postprocess", **request
        )
        return async_to_sync(services.afacts_save)(
            instance=local_instance,
            user_id=alice.pk,
            chat_id=chat,
            facts=extraction_parse(answer.data),
        )

    assert run() == 3
    assert run() == 3

    stored = Memory.objects.filter(user=alice)
    assert stored.count() == 3
    assert set(stored.values_list("category", flat=True)) == {"event", "relationship", "preference"}
    assert set(stored.values_list("source_chat_id", flat=True)) == {chat}
    sent = llm_script.requests[0]
    assert sent.params["response_format"]["json_schema"]["schema"] == extraction.RESPONSE_SCHEMA
