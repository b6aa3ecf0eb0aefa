"""Edit and regenerate in the browser: versions with "2 / 3" arrows that switch the
branch shown, the scripted model given the chosen branch only, versions that survive a
reload, and only ciphertext of them in the database (docs/protocol.md §12)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from chats.models import Message
from instances.models import Instance
from tests.ui.pages import new_user, reopen_chat
from tests.ui.test_chat import instance, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]

CANARY = "quokkacanary"


def _asked(llm: UIModelServer) -> list[str]:
    """The conversation of the last streamed answer request (no system prompt)."""
    answers = [r for r in llm.requests if r.get("stream") and not r.get("response_format")]
    return [str(m["content"]) for m in answers[-1]["messages"] if m["role"] != "system"]


def _shown(page: Any) -> list[str]:
    return page.locator(".msg .msg-body").evaluate_all("nodes => nodes.map((n) => n.innerText)")


def _answered(page: Any, text: str) -> None:
    page.wait_for_selector(f".msg-assistant[data-status=done] .msg-body:has-text('{text}')")


def test_edit_and_regenerate_make_versions_the_model_gets_the_branch_and_a_reload_keeps(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    # No rolling summary: whether one is ready before the next turn depends on timing, and
    # with it the history would start with its exchange (what is asserted is the branch).
    llm.set_json(summary="")
    llm.queue(
        Turn(pieces=["Answer one."]),
        Turn(pieces=[f"Answer two {CANARY}."]),
        Turn(pieces=["Answer edited."]),
        Turn(pieces=["Answer regenerated."]),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "versioner")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First question")
    _answered(page, "Answer one.")
    send(page, f"Second question {CANARY}")
    _answered(page, "Answer two")

    # Edit the second question: a new version, answered from the first answer on.
    page.locator(".msg-user").nth(1).locator(".edit").click()
    page.fill(".edit-input", "Second question, edited")
    page.click(".edit-save")
    _answered(page, "Answer edited.")
    assert _asked(llm) == ["First question", "Answer one.", "Second question, edited"]
    assert _shown(page) == [
        "First question",
        "Answer one.",
        "Second question, edited",
        "Answer edited.",
    ]
    page.wait_for_selector(".msg-user >> nth=1 >> .version-count:has-text('2 / 2')")

    # Regenerate the last answer: a second version of it, from the same point.
    page.locator(".msg-assistant").last.locator(".regenerate").click()
    _answered(page, "Answer regenerated.")
    assert _asked(llm) == ["First question", "Answer one.", "Second question, edited"]
    page.wait_for_selector(".msg-assistant >> nth=1 >> .version-count:has-text('2 / 2')")

    # The arrows switch the answer, then the question and what follows it.
    page.locator(".msg-assistant").last.locator(".version-prev").click()
    _answered(page, "Answer edited.")
    page.locator(".msg-user").nth(1).locator(".version-prev").click()
    _answered(page, "Answer two")
    assert _shown(page) == [
        "First question",
        "Answer one.",
        f"Second question {CANARY}",
        f"Answer two {CANARY}.",
    ]

    # After a reload every version is there; the newest shows first.
    reopen_chat(page)
    _answered(page, "Answer regenerated.")
    assert page.locator(".msg-user").nth(1).locator(".version-count").inner_text() == "2 / 2"
    assert page.locator(".msg-assistant").nth(1).locator(".version-count").inner_text() == "2 / 2"
    page.locator(".msg-user").nth(1).locator(".version-prev").click()
    _answered(page, "Answer two")
    assert _shown(page)[2:] == [f"Second question {CANARY}", f"Answer two {CANARY}."]

    # Continuing the old branch gives the model that branch only.
    llm.queue(Turn(pieces=["Third answer."]))
    send(page, "Third question")
    _answered(page, "Third answer.")
    assert _asked(llm) == [
        "First question",
        "Answer one.",
        f"Second question {CANARY}",
        f"Answer two {CANARY}.",
        "Third question",
    ]

    # Every version is stored as client ciphertext only.
    deadline = time.monotonic() + 10
    while Message.objects.filter(encrypted_content__isnull=True).exists():
        assert time.monotonic() < deadline, "a message was never stored"
        page.wait_for_timeout(100)  # the page's message.store frames are on their way
    rows = list(Message.objects.all())
    assert len(rows) == 9
    for row in rows:
        stored = (row.encrypted_content or "").lower()
        for word in (CANARY, "question", "edited", "regenerated", "answer"):
            assert word not in stored
        assert row.server_content is None  # each tab stored its ciphertext
    assert sum(1 for row in rows if row.encrypted_content) == 9


def test_retry_of_a_failed_regenerated_answer_answers_again_beside_the_done_one(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")  # no rolling summary in the history (see above)
    llm.queue(
        Turn(pieces=["Answer one."]),
        Turn(pieces=[], status=400),
        Turn(pieces=["Answer after retry."]),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "reretry")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "A question")
    _answered(page, "Answer one.")

    page.locator(".msg-assistant").last.locator(".regenerate").click()
    page.wait_for_selector(".msg-assistant[data-status=failed] button.retry")
    page.click(".msg-assistant[data-status=failed] button.retry")
    _answered(page, "Answer after retry.")

    assert _asked(llm) == ["A question"]
    assert "conflict" not in (page.text_content("#composer-status") or "")
    answers = Message.objects.filter(chat__owner__username="reretry", role="assistant")
    assert sorted(answers.values_list("status", flat=True)) == ["done", "done", "failed"]
    assert len({a.parent_id for a in answers}) == 1


def test_no_edit_or_regenerate_shows_while_a_turn_runs_in_the_chat(
    asgi_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.set_json(summary="")
    llm.queue(
        Turn(pieces=["Answer one."]),
        Turn(pieces=["Slow", " answer", " two."], gap_s=1.0),
    )
    page = ui_context.new_page()
    new_user(page, asgi_server, "busyversions")
    page.wait_for_selector("#conn[data-state=open]")
    send(page, "First question")
    _answered(page, "Answer one.")
    page.wait_for_selector(".msg-assistant .regenerate")
    assert page.locator(".msg-user .edit").count() == 1

    send(page, "Second question")
    page.wait_for_selector(".msg-assistant >> nth=1 >> .msg-body:has-text('Slow')")
    # Regenerating the first answer (or editing a question) now would show another branch
    # and hide the running exchange.
    assert page.locator(".regenerate").count() == 0
    assert page.locator(".edit").count() == 0

    _answered(page, "Slow answer two.")
    page.wait_for_selector(".msg-assistant >> nth=1 >> .regenerate")
    assert page.locator(".regenerate").count() == 1
    assert page.locator(".msg-user .edit").count() == 2
