"""The tier picker beside the composer: only the tiers the user's role allows, and the
choice reaches pre-processing (``preprocess.done``) and the model of that tier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from instances.models import Instance, InstanceMember
from tests.ui.conftest import daphne_serving
from tests.ui.pages import new_user, unlock, watch
from tests.ui.test_chat import instance, llm, send
from tests.ui.wire import Turn, UIModelServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["instance", "llm"]


@pytest.fixture(scope="module")
def tiered_server(
    django_db_setup: Any, django_db_blocker: Any, ui_llm: UIModelServer, tmp_path_factory: Any
) -> Iterator[str]:
    """A live app whose three tiers are three models of ``ui_llm`` (wire-fast, …)."""
    env = {"OPENAI_API_KEY": "sk-ui-test"}
    for tier in ("fast", "standard", "heavy"):
        env[f"LLM_{tier.upper()}_MODEL"] = f"openai/wire-{tier}"
        env[f"LLM_{tier.upper()}_API_BASE"] = ui_llm.api_base
    with daphne_serving(env, tmp_path_factory.mktemp("daphne-tiers")) as base:
        yield base


def _preprocess_frames(page: Any) -> list[dict[str, Any]]:
    """The ``preprocess.done`` frames the page receives (not the later title-only one)."""
    frames: list[dict[str, Any]] = []

    def keep(payload: str) -> None:
        if '"preprocess.done"' in payload:
            frame = json.loads(payload)
            if frame.get("reason") != "title":
                frames.append(frame)

    page.on("websocket", lambda socket: socket.on("framereceived", keep))
    return frames


def _offered(page: Any) -> list[str]:
    return [o.get_attribute("value") or "" for o in page.locator("#tier-picker option").all()]


def _answer_models(llm: UIModelServer) -> list[str]:
    """The models of the streamed answer requests (not the JSON-schema side calls)."""
    return [r["model"] for r in llm.requests if r.get("stream") and not r.get("response_format")]


def test_a_member_gets_the_tiers_of_the_role_and_the_picked_one_answers(
    tiered_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Quick ", "answer."]))
    page = ui_context.new_page()
    frames = _preprocess_frames(page)
    new_user(page, tiered_server, "tam")
    page.wait_for_selector("#conn[data-state=open]")

    assert _offered(page) == ["", "fast", "standard"]
    assert page.locator("#tier-picker option[value=fast]").get_attribute("title") == "wire-fast"
    page.select_option("#tier-picker", "fast")
    send(page, "Explain the architecture of a comprehensive algorithm in detail")
    page.wait_for_selector(".msg-assistant[data-status=done]")

    [done] = frames
    assert (done["tier"], done["model"], done["reason"]) == (
        "fast",
        "openai/wire-fast",
        "requested by the client",
    )
    assert _answer_models(llm) == ["wire-fast"]
    badge = page.locator(".msg-assistant .badge-model")
    assert (badge.inner_text(), badge.get_attribute("title")) == ("wire-fast", "openai/wire-fast")


def test_heavy_is_offered_to_an_admin_and_reaches_the_heavy_model(
    tiered_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["A ", "thorough ", "answer."]), Turn(pieces=["Auto."]))
    page = ui_context.new_page()
    watched = watch(page)
    frames = _preprocess_frames(page)
    new_user(page, tiered_server, "uma")
    assert "heavy" not in _offered(page)
    InstanceMember.objects.filter(user__username="uma").update(role=InstanceMember.Role.ADMIN)
    page.reload()
    unlock(page)
    page.wait_for_selector("#conn[data-state=open]")

    assert _offered(page) == ["", "fast", "standard", "heavy"]
    page.select_option("#tier-picker", "heavy")
    send(page, "hi")
    page.wait_for_selector(".msg-assistant[data-status=done]")
    page.select_option("#tier-picker", "")
    send(page, "hello")
    page.wait_for_selector(".msg-assistant[data-status=done] >> nth=1")

    assert [(f["tier"], f["model"], f["reason"]) for f in frames] == [
        ("heavy", "openai/wire-heavy", "requested by the client"),
        ("fast", "openai/wire-fast", "short conversational message"),
    ]
    assert _answer_models(llm) == ["wire-heavy", "wire-fast"]
    badges = page.locator(".msg-assistant .badge-model")
    assert badges.all_inner_texts() == ["wire-heavy", "wire-fast"]
    assert [m for m in watched.console if m.startswith("pageerror")] == []


def test_an_answer_regenerated_on_another_tier_is_a_version_from_that_tier(
    tiered_server: str, instance: Instance, llm: UIModelServer, ui_context: Any
) -> None:
    llm.queue(Turn(pieces=["Fast answer."]), Turn(pieces=["Standard answer."]))
    page = ui_context.new_page()
    watched = watch(page)
    frames = _preprocess_frames(page)
    new_user(page, tiered_server, "ria")
    page.wait_for_selector("#conn[data-state=open]")
    page.select_option("#tier-picker", "fast")
    send(page, "hello")
    page.wait_for_selector(".msg-assistant[data-status=done] .msg-body:has-text('Fast answer.')")

    page.select_option("#tier-picker", "standard")
    page.locator(".msg-assistant").last.locator(".regenerate").click()
    page.wait_for_selector(
        ".msg-assistant[data-status=done] .msg-body:has-text('Standard answer.')"
    )
    page.wait_for_selector(".msg-assistant .version-count:has-text('2 / 2')")

    assert [(f["tier"], f["model"]) for f in frames] == [
        ("fast", "openai/wire-fast"),
        ("standard", "openai/wire-standard"),
    ]
    assert _answer_models(llm) == ["wire-fast", "wire-standard"]
    answer = page.locator(".msg-assistant").last
    assert answer.locator(".badge-model").inner_text() == "wire-standard"
    # The earlier version keeps the model that wrote it.
    answer.locator(".version-prev").click()
    page.wait_for_selector(".msg-assistant .msg-body:has-text('Fast answer.')")
    assert page.locator(".msg-assistant").last.locator(".badge-model").inner_text() == "wire-fast"
    assert [m for m in watched.console if m.startswith("pageerror")] == []
