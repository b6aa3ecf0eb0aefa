"""The API docs page (/api/docs/, Swagger UI from drf-spectacular-sidecar) in a real
browser: it renders the schema's operations under the site's CSP without a violation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import UserFactory
from tests.ui.pages import PASSWORD, watch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_docs_page_renders_the_schema_with_no_csp_violation(
    asgi_server: str, ui_context: Any
) -> None:
    UserFactory(username="dora")
    page = ui_context.new_page()
    watched = watch(page)
    page.goto(f"{asgi_server}/accounts/login/")
    page.fill("#id_username", "dora")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")

    answer = page.goto(f"{asgi_server}/api/docs/")
    page.wait_for_selector("#operations-memories-memories_create")
    page.click("#operations-memories-memories_create .opblock-summary")
    page.wait_for_selector("#operations-memories-memories_create .opblock-body")
    page.wait_for_timeout(300)
    box_sizing = page.evaluate("getComputedStyle(document.documentElement).boxSizing")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")

    assert answer is not None
    assert answer.status == 200
    csp = answer.headers["content-security-policy"]
    assert "'unsafe-inline'" not in csp
    assert page.title() == "OpenMates REST API"
    # The page's own styles (formerly an inline <style>) still apply, from a file.
    assert box_sizing == "border-box"
    assert background == "rgb(250, 250, 250)"
    assert watched.csp_violations() == []
    assert [m for m in watched.console if m.startswith(("error", "pageerror"))] == []
