"""The account page for API tokens: create (shown once), list, revoke; CSP-safe markup."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from accounts.models import ApiToken
from accounts.selectors import api_token_user
from accounts.services import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/accounts/tokens/"
SHOWN_TOKEN = re.compile(r'data-testid="new-token">(om_[0-9a-f]{12}_[A-Za-z0-9_-]{43})<')


def _signed_in(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def test_the_page_needs_a_signed_in_user(client: Client) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_creating_shows_the_token_once_and_never_again(client: Client, owner: Any) -> None:
    _signed_in(client, owner)

    created = client.post(PAGE, {"name": "backup script", "expires_days": "30"})

    assert created.status_code == 200
    assert "no-store" in created["Cache-Control"]
    match = SHOWN_TOKEN.search(created.content.decode())
    assert match is not None
    raw = match.group(1)
    token = ApiToken.objects.get()
    assert (token.name, token.prefix) == ("backup script", raw[3:15])
    assert token.expires_at is not None
    assert api_token_user(raw) == owner
    listing = client.get(PAGE).content.decode()
    assert raw not in listing
    assert f"om_{token.prefix}_…" in listing
    assert "backup script" in listing


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"name": ""}, "This field is required."),
        ({"name": "x" * 101}, "Ensure this value has at most 100 characters (it has 101)."),
        ({"name": "ci", "expires_days": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"name": "ci", "expires_days": "soon"}, "Enter a whole number."),
    ],
)
def test_bad_input_is_a_form_error_and_creates_nothing(
    client: Client, owner: Any, data: dict[str, str], error: str
) -> None:
    _signed_in(client, owner)
    response = client.post(PAGE, data)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert SHOWN_TOKEN.search(response.content.decode()) is None
    assert not ApiToken.objects.exists()


def test_revoking_from_the_page(client: Client, owner: Any) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    _signed_in(client, owner)

    response = client.post(f"/accounts/tokens/{token.prefix}/revoke/")

    assert response.status_code == 302
    assert response["Location"] == PAGE
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert api_token_user(raw) is None
    listing = client.get(PAGE).content.decode()
    assert "revoked" in listing
    assert "Revoked the API token “laptop”." in listing


def test_another_users_token_cannot_be_revoked(client: Client, owner: Any, stranger: Any) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    _signed_in(client, stranger)

    assert client.post(f"/accounts/tokens/{token.prefix}/revoke/").status_code == 404
    assert client.get(f"/accounts/tokens/{token.prefix}/revoke/").status_code == 405
    assert "laptop" not in client.get(PAGE).content.decode()
    assert api_token_user(raw) == owner


def test_the_page_has_no_inline_script_or_style(client: Client, owner: Any) -> None:
    api_token_create(user=owner, name="laptop")
    _signed_in(client, owner)

    response = client.post(PAGE, {"name": "another"})

    html = response.content.decode()
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert (policy["script-src"], policy["style-src"]) == ("'self'", "'self'")
    assert re.search(r"<script(?![^>]*\bsrc=)", html) is None
    assert "<style" not in html
    assert re.search(r"\sstyle=", html) is None
    assert re.search(r"\son[a-z]+=", html) is None
