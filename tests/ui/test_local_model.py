"""Sign-up → passphrase → answer in the browser against the bundled local model.

The embedded default: the instance's tiers are the bundled Gemma 3 270M served by
llama-cpp-python (``openmates.runlocal.llama.LocalModelServer``, as ``runlocal`` starts
it), so pre- and post-processing skip their model calls and the answer is the base
model's continuation.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accounts.models import SignupPolicy
from chats.models import Message
from instances.models import Instance
from openmates.runlocal.llama import LocalModelServer
from openmates.runlocal.process import free_port
from tests.ui.conftest import daphne_serving
from tests.ui.pages import new_user, unlock, watch

pytestmark = [
    pytest.mark.browser,
    pytest.mark.local_model,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def local_server(django_db_setup: Any, tmp_path_factory: Any) -> Iterator[str]:
    directory = Path(os.environ.get("OPENMATES_TEST_MODEL_DIR", "~/.cache/openmates"))
    model = LocalModelServer(
        directory.expanduser(), free_port(), context_tokens=8192, say=lambda message: None
    )
    api_base = model.start(timeout_s=240)
    env = {"LLM_LOCAL_API_BASE": api_base, "LLM_LOCAL_MAX_TOKENS": "24"}
    try:
        with daphne_serving(env, tmp_path_factory.mktemp("daphne-local")) as base:
            yield base
    finally:
        model.stop()


def test_sign_up_and_get_an_answer_from_the_bundled_model(
    local_server: str, ui_context: Any
) -> None:
    instance = Instance.objects.create(slug="demo", name="Demo")
    SignupPolicy.objects.create(instance=instance, open_signup=True)
    page = ui_context.new_page()
    watched = watch(page)
    new_user(page, local_server, "gus")
    page.wait_for_selector("#conn[data-state=open]")

    page.fill("#composer-input", "Tell me about Paris, the capital of France.")
    page.press("#composer-input", "Enter")

    page.wait_for_selector(".msg-assistant[data-status=done]", timeout=120_000)
    answer = page.locator(".msg-assistant .msg-body").last
    assert answer.inner_text().strip()
    badge = page.locator(".msg-assistant .badge-model")
    assert badge.inner_text() == "Gemma 3 270M (bundled)"
    assert badge.get_attribute("title") == "text-completion-openai/gemma-3-270m"
    page.reload()
    unlock(page)
    page.click(".chat-item .chat-item-open")
    page.wait_for_selector(".msg-user .msg-body:has-text('Tell me about Paris')")
    assert Message.objects.filter(chat__owner__username="gus", role="assistant").count() == 1
    assert watched.csp_violations() == []
