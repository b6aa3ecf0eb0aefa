"""What an API token may not do: replace the wrapped keys, delete the account (403
``session_required``); what it still may: read the wrapped keys."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.services import api_token_create
from chats.models import UserKeys

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
SESSION_REQUIRED = {
    "code": "session_required",
    "message": "This needs a signed-in browser session; API tokens cannot do it.",
}
KDF = {
    "name": "PBKDF2",
    "hash": "SHA-256",
    "iterations": 600000,
    "salt": "MDEyMzQ1Njc4OWFiY2RlZg==",
}
KEYS: dict[str, Any] = {
    "wrapped_master_key": "AQID",
    "recovery_wrapped_master_key": "BAUG",
    "master_key_id": "AAAAAAAAAAA=",
    "recovery_key_id": "AQEBAQEBAQE=",
    "kdf": KDF,
}
# What the browser sends: the keys and the login password, checked again by the server.
PUT_KEYS: dict[str, Any] = {**KEYS, "password": PASSWORD}


def _bearer(user: Any) -> APIClient:
    _, raw = api_token_create(user=user, name="script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _browser(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_a_token_cannot_replace_the_wrapped_keys(keyed_owner: Any) -> None:
    assert _browser(keyed_owner).put("/api/chats/keys/", PUT_KEYS, format="json").json() == {
        "version": 1
    }
    hostile = {**PUT_KEYS, "wrapped_master_key": "BwgJ", "version": 1}

    refused = _bearer(keyed_owner).put("/api/chats/keys/", hostile, format="json")

    assert refused.status_code == 403
    assert refused.json() == SESSION_REQUIRED
    stored = UserKeys.objects.get(user=keyed_owner)
    assert (stored.wrapped_master_key, stored.version) == ("AQID", 1)


def test_a_token_cannot_create_the_first_wrapped_keys_either(keyed_owner: Any) -> None:
    refused = _bearer(keyed_owner).put("/api/chats/keys/", PUT_KEYS, format="json")

    assert refused.status_code == 403
    assert refused.json() == SESSION_REQUIRED
    assert not UserKeys.objects.filter(user=keyed_owner).exists()


def test_a_token_still_reads_the_wrapped_keys(keyed_owner: Any) -> None:
    _browser(keyed_owner).put("/api/chats/keys/", PUT_KEYS, format="json")

    answer = _bearer(keyed_owner).get("/api/chats/keys/")

    assert answer.status_code == 200
    assert answer.json() == {**KEYS, "version": 1}


def test_a_token_cannot_delete_the_account_even_with_the_password(keyed_owner: Any) -> None:
    refused = _bearer(keyed_owner).delete("/api/account/", {"password": PASSWORD}, format="json")

    assert refused.status_code == 403
    assert refused.json() == SESSION_REQUIRED
    assert get_user_model().objects.filter(pk=keyed_owner.pk).exists()


def test_a_session_with_a_stray_bearer_header_is_still_a_session(keyed_owner: Any) -> None:
    # SessionAuthentication is tried first, so a browser keeps its rights.
    client = _browser(keyed_owner)
    _, raw = api_token_create(user=keyed_owner, name="script")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    assert client.put("/api/chats/keys/", PUT_KEYS, format="json").json() == {"version": 1}
