"""The account page for API tokens: create (shown once, after the password, within the
limits), list, revoke; CSP-safe markup."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from accounts.selectors import api_token_user
from accounts.services import (
    API_TOKEN_ACTIVE_MAX,
    API_TOKEN_CREATE_PER_HOUR,
    api_token_create,
)

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = "/accounts/tokens/"
SHOWN_TOKEN = re.compile(r'data-testid="new-token">(om_[0-9a-f]{12}_[A-Za-z0-9_-]{43})<')
PASSWORD = "correct horse battery staple"


def _signed_in(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def test_the_page_needs_a_signed_in_user(client: Client) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_creating_shows_the_token_once_and_never_again(client: Client, owner: Any) -> None:
    _signed_in(client, owner)

    posted = client.post(
        PAGE, {"name": "backup script", "expires_days": "30", "password": PASSWORD}
    )
    created = client.get(PAGE)

    assert (posted.status_code, posted["Location"]) == (302, PAGE)
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
    response = client.post(PAGE, {**data, "password": PASSWORD})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert SHOWN_TOKEN.search(response.content.decode()) is None
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    ("password", "error"),
    [("", "This field is required."), ("guess", "That is not your password.")],
)
def test_creating_a_token_needs_the_current_password(
    client: Client, owner: Any, password: str, error: str
) -> None:
    # A session left open (or stolen) must not be enough to mint tokens that outlive it.
    _signed_in(client, owner)

    response = client.post(PAGE, {"name": "ci", "password": password})

    assert response.status_code == 200
    assert error in response.content.decode()
    assert SHOWN_TOKEN.search(response.content.decode()) is None
    assert not ApiToken.objects.exists()


def test_password_guesses_on_the_token_page_lock_out_like_sign_ins(
    client: Client, owner: Any
) -> None:
    _signed_in(client, owner)
    guesses = [client.post(PAGE, {"name": "ci", "password": f"guess {n}"}) for n in range(5)]
    # AXES_FAILURE_LIMIT (5): the fifth failure already answers with the lockout page.
    assert [g.status_code for g in guesses] == [200, 200, 200, 200, 429]

    response = client.post(PAGE, {"name": "ci", "password": PASSWORD})

    assert response.status_code == 429
    assert b"Too many failed sign-ins" in response.content
    assert not ApiToken.objects.exists()


def test_past_the_hourly_limit_the_page_answers_429_and_creates_nothing(
    client: Client, owner: Any
) -> None:
    for n in range(API_TOKEN_CREATE_PER_HOUR):
        api_token_create(user=owner, name=f"script {n}")
    _signed_in(client, owner)

    response = client.post(PAGE, {"name": "one more", "password": PASSWORD})

    assert response.status_code == 429
    assert 3540 <= int(response["Retry-After"]) <= 3600
    html = response.content.decode()
    assert (
        f"You created {API_TOKEN_CREATE_PER_HOUR} API tokens in the last hour, the most "
        "allowed; try again in 60 minutes." in html
    )
    assert SHOWN_TOKEN.search(html) is None
    assert ApiToken.objects.count() == API_TOKEN_CREATE_PER_HOUR


def test_at_the_active_token_cap_the_page_asks_to_revoke_one(client: Client, owner: Any) -> None:
    for n in range(API_TOKEN_ACTIVE_MAX):
        # Made two hours ago each: outside the hourly limit, still active.
        token, _ = api_token_create(user=owner, name=f"script {n}")
        ApiToken.objects.filter(pk=token.pk).update(created_at=timezone.now() - timedelta(hours=2))
    _signed_in(client, owner)

    refused = client.post(PAGE, {"name": "one more", "password": PASSWORD})
    client.post(f"/accounts/tokens/{token.prefix}/revoke/")
    allowed = client.post(PAGE, {"name": "one more", "password": PASSWORD}, follow=True)

    assert refused.status_code == 200
    assert (
        f"You have {API_TOKEN_ACTIVE_MAX} active API tokens, the most allowed; revoke one first."
        in refused.content.decode()
    )
    assert SHOWN_TOKEN.search(allowed.content.decode()) is not None
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == API_TOKEN_ACTIVE_MAX


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

    response = client.post(PAGE, {"name": "another", "password": PASSWORD}, follow=True)

    html = response.content.decode()
    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert (policy["script-src"], policy["style-src"]) == ("'self'", "'self'")
    assert re.search(r"<script(?![^>]*\bsrc=)", html) is None
    assert "<style" not in html
    assert re.search(r"\sstyle=", html) is None
    assert re.search(r"\son[a-z]+=", html) is None


def test_reloading_after_creating_makes_no_second_token(client: Client, owner: Any) -> None:
    _signed_in(client, owner)

    shown = client.post(PAGE, {"name": "ci", "password": PASSWORD}, follow=True)
    reloaded = client.get(PAGE)

    assert shown.redirect_chain == [(PAGE, 302)]
    assert SHOWN_TOKEN.search(shown.content.decode()) is not None
    assert SHOWN_TOKEN.search(reloaded.content.decode()) is None
    assert ApiToken.objects.count() == 1


def test_the_new_token_has_a_copy_button_and_revoking_asks_first(
    client: Client, owner: Any
) -> None:
    _signed_in(client, owner)

    html = client.post(PAGE, {"name": "laptop", "password": PASSWORD}, follow=True)
    page = html.content.decode()

    assert '<script src="/static/js/tokens.js" defer></script>' in page
    assert 'data-copy="new-token"' in page
    confirm = "Revoke the API token “laptop”? Programs using it stop working at once."
    assert f'data-confirm="{confirm}"' in page
    assert client.get("/static/js/tokens.js").status_code == 200


def test_the_account_pages_link_back_to_the_chats(client: Client, owner: Any) -> None:
    _signed_in(client, owner)
    for page in (PAGE, "/accounts/password/"):
        body = client.get(page).content.decode()
        assert '<a href="/">Chats</a>' in body, page
