"""Requests Django refuses before a view runs answer the JSON error contract under /api/.

A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 ``request_too_large``, a ``Host`` outside
``ALLOWED_HOSTS`` is 400 ``invalid_host`` (both were Django's HTML 400 page); other pages
keep Django's own answers. The limit fits the largest REST body the endpoints accept.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation, TooManyFieldsSent
from django.test import Client, RequestFactory

from chats import services
from chats.models import Chat
from instances.models import InstanceMember
from openmates.api_errors import bad_request
from pipeline.ids import new_id
from tests.chats.rest import client_envelope, signed_in_client

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
# chats.api's _MAX_CIPHERTEXT: standard base64 of at most 135,000 envelope bytes.
MAX_CIPHERTEXT_CHARACTERS = 180_000


def _too_large() -> str:
    return json.dumps({"password": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    return services.chat_create(
        user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


def test_a_rest_body_over_the_limit_answers_413_json_and_changes_nothing(owner: Any) -> None:
    client = signed_in_client(owner)
    for method, path in (("POST", "/api/chats/"), ("DELETE", "/api/account/")):
        answer = client.generic(method, path, data=_too_large(), content_type="application/json")
        assert answer.status_code == 413, (method, answer.content[:200])
        assert answer["Content-Type"] == "application/json"
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        assert answer.json() == {
            "code": "request_too_large",
            "message": f"Request bodies are at most {limit} bytes.",
        }
    assert get_user_model().objects.filter(pk=owner.pk).exists()
    assert not Chat.objects.filter(owner=owner).exists()


def test_a_page_body_over_the_limit_keeps_djangos_answer(db: Any) -> None:
    form = "username=demo&password=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    answer = Client().post(
        "/accounts/login/", data=form, content_type="application/x-www-form-urlencoded"
    )
    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/html")


def test_the_largest_rest_body_fits_the_limit(chat: Chat, keyed_owner: Any) -> None:
    # A chat PATCH may carry five ciphertexts of the maximum size: the biggest REST body.
    body_bytes = MAX_CIPHERTEXT_CHARACTERS // 4 * 3 - 21
    fields = ("title", "summary", "tags", "category", "icon")
    payload = {f"encrypted_{name}": client_envelope(os.urandom(body_bytes)) for name in fields}
    assert {len(value) for value in payload.values()} == {MAX_CIPHERTEXT_CHARACTERS}
    body = json.dumps({"version": chat.version, **payload})
    assert len(body) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    answer = signed_in_client(keyed_owner).patch(
        f"/api/chats/{chat.pk}/", data=body, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content[:300]
    chat.refresh_from_db()
    assert chat.encrypted_icon == payload["encrypted_icon"]


def test_a_host_outside_allowed_hosts_answers_json_under_api_and_html_elsewhere(
    db: Any,
) -> None:
    api = Client().get("/api/chats/", HTTP_HOST="evil.example")
    assert api.status_code == 400
    assert api.json() == {
        "code": "invalid_host",
        "message": "The Host header names no host this server serves.",
    }
    page = Client().get("/accounts/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("exception", "code"),
    [(TooManyFieldsSent("1001 fields"), "too_many_fields"), (SuspiciousOperation(), "bad_request")],
)
def test_other_refused_requests_under_api_answer_a_stable_code(
    exception: Exception, code: str
) -> None:
    answer = bad_request(RequestFactory().post("/api/chats/"), exception)
    assert answer.status_code == 400
    assert json.loads(answer.content)["code"] == code
