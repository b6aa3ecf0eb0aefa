"""The API documentation page /api/docs/: Swagger UI over /api/schema/ from local files only
(drf-spectacular-sidecar through WhiteNoise), allowed by the page's CSP, linked from the
API tokens page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.chats.rest import signed_in_client

pytestmark = pytest.mark.django_db


def test_the_docs_page_loads_swagger_ui_from_this_server_only(owner: Any) -> None:
    client = signed_in_client(owner)

    page = client.get("/api/docs/")
    html = page.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    script = next(s for s in sources if s.endswith(".js") and "swagger-ui-bundle" in s)
    bundle = Client().get(script)

    assert page.status_code == 200
    assert sources, html
    assert all(s.startswith("/") and not s.startswith("//") for s in sources), sources
    assert "<script>" not in html  # the split view serves its set-up as a file (CSP)
    assert bundle.status_code == 200
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "http" not in csp


def test_the_docs_page_is_linked_from_the_api_tokens_page(owner: Any) -> None:
    page = signed_in_client(owner).get("/accounts/tokens/").content.decode()

    assert 'href="/api/docs/"' in page
