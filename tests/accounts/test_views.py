"""The account pages over HTTP: CSP, sign-up, throttled sign-in, sign-out, deletion."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.services import session_socket_group, user_socket_group
from instances.models import Instance, InstanceMember

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _directives(header: str) -> dict[str, str]:
    return {
        part.strip().split(" ", 1)[0]: part.strip().split(" ", 1)[1]
        for part in header.split(";")
        if part.strip()
    }


def test_pages_carry_the_csp_and_no_referrer(client: Client) -> None:
    response = client.get("/accounts/login/")

    assert response.status_code == 200
    assert _directives(response["Content-Security-Policy"]) == _directives(EXPECTED_CSP)
    assert response["Referrer-Policy"] == "no-referrer"


def test_home_sends_anonymous_visitors_to_sign_in(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"


def _skip_target_exists(html: str) -> bool:
    """Whether the page's "Skip to content" link names an element of the page."""
    target = re.search(r'class="skip-link" href="#([^"]+)"', html)
    return target is not None and f'id="{target.group(1)}"' in html


def test_the_skip_link_of_the_app_and_of_other_pages_leads_somewhere(
    client: Client, owner: Any
) -> None:
    assert _skip_target_exists(client.get("/accounts/login/").content.decode())
    instance = Instance.objects.create(slug="home", name="Home")
    InstanceMember.objects.create(instance=instance, user=owner, role="owner")
    client.force_login(owner)
    assert _skip_target_exists(client.get("/").content.decode())
    assert _skip_target_exists(client.get("/accounts/tokens/").content.decode())


def test_home_is_the_app_for_a_signed_in_member(client: Client, owner: Any) -> None:
    instance = Instance.objects.create(slug="home", name="Home")
    InstanceMember.objects.create(instance=instance, user=owner, role="owner")
    client.force_login(owner)

    response = client.get("/")

    assert response.status_code == 200
    assert b'id="app-config"' in response.content
    assert b'"slug": "home"' in response.content
    assert b"<script>" not in response.content
    assert b"style=" not in response.content


def test_sign_up_creates_and_signs_in_the_account(client: Client, open_instance: Instance) -> None:
    response = client.post(
        "/accounts/signup/",
        {
            "username": "ada",
            "email": "ada@example.test",
            "password1": "a long passphrase 17",
            "password2": "a long passphrase 17",
        },
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200
    assert InstanceMember.objects.get(user__username="ada").instance == open_instance


def test_sign_up_page_says_when_sign_up_needs_an_invitation(
    client: Client, default_instance: Instance
) -> None:
    response = client.get("/accounts/signup/")

    assert b"by invitation only" in response.content
    assert b'name="password1"' not in response.content


def test_sign_up_refuses_a_weak_password(client: Client, open_instance: Instance) -> None:
    response = client.post(
        "/accounts/signup/",
        {"username": "ada", "email": "ada@example.test", "password1": "123", "password2": "123"},
    )

    assert response.status_code == 200
    assert b"too short" in response.content
    assert not get_user_model().objects.filter(username="ada").exists()


def test_forms_need_a_csrf_token(owner: Any) -> None:
    strict = Client(enforce_csrf_checks=True)

    response = strict.post(
        "/accounts/login/", {"username": "owner", "password": "correct horse battery staple"}
    )

    assert response.status_code == 403


def test_sign_in_is_locked_after_five_failures_even_with_the_right_password(
    client: Client, owner: Any
) -> None:
    for _ in range(5):
        client.post("/accounts/login/", {"username": "owner", "password": "wrong"})

    response = client.post(
        "/accounts/login/", {"username": "owner", "password": "correct horse battery staple"}
    )

    assert response.status_code == 429
    assert b"Too many failed sign-ins" in response.content
    assert b"Try again in 15 minutes." in response.content
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (900, "15 minutes"),
        (60, "1 minute"),
        (59, "1 minute"),
        (3600, "1 hour"),
        (5400, "1 hour 30 minutes"),
        (93_600, "1 day 2 hours"),
    ],
)
def test_the_lockout_pause_reads_in_words(seconds: int, words: str) -> None:
    from datetime import timedelta

    from accounts.templatetags.account_text import duration_words

    assert duration_words(timedelta(seconds=seconds)) == words


def test_sign_in_with_the_right_password_works(client: Client, owner: Any) -> None:
    response = client.post(
        "/accounts/login/", {"username": "owner", "password": "correct horse battery staple"}
    )

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(owner.pk)


def test_sign_out_needs_post_and_closes_the_sessions_sockets_only(
    client: Client, owner: Any
) -> None:
    layer = get_channel_layer()
    this_session, other_device = (async_to_sync(layer.new_channel)() for _ in range(2))
    client.force_login(owner)
    elsewhere = Client()
    elsewhere.force_login(owner)
    sessions = (str(client.session.session_key), str(elsewhere.session.session_key))
    async_to_sync(layer.group_add)(session_socket_group(sessions[0]), this_session)
    async_to_sync(layer.group_add)(session_socket_group(sessions[1]), other_device)

    assert client.get("/accounts/logout/").status_code == 405
    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert "_auth_user_id" not in client.session
    assert async_to_sync(layer.receive)(this_session) == {"type": "session.ended", "code": 4401}
    # The other device's session holds, and its socket is told nothing.
    assert elsewhere.session["_auth_user_id"] == str(owner.pk)
    with pytest.raises(TimeoutError):
        async_to_sync(asyncio.wait_for)(layer.receive(other_device), 0.3)


def test_password_verify_answers_whether_it_is_the_login_password(
    client: Client, owner: Any
) -> None:
    client.force_login(owner)

    right = client.post("/accounts/password/verify/", {"password": "correct horse battery staple"})
    wrong = client.post("/accounts/password/verify/", {"password": "nope"})

    assert right.json() == {"ok": True}
    assert wrong.json() == {"ok": False}


def test_a_locked_out_password_check_says_so_in_json_with_the_wait(
    client: Client, owner: Any
) -> None:
    client.force_login(owner)
    for _ in range(5):
        client.post("/accounts/password/verify/", {"password": "nope"})

    locked = client.post(
        "/accounts/password/verify/",
        {"password": "correct horse battery staple"},
        headers={"Accept": "application/json"},
    )

    assert locked.status_code == 429
    assert locked.json() == {
        "code": "locked_out",
        "message": "Too many wrong passwords: sign-in is paused for this account from your "
        "address. Try again in 15 minutes.",
        "retry_after": 900,
    }


def test_password_change_keeps_this_session_and_closes_sockets(client: Client, owner: Any) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(user_socket_group(owner.pk), channel)
    client.force_login(owner)

    response = client.post(
        "/accounts/password/",
        {
            "old_password": "correct horse battery staple",
            "new_password1": "another long secret 42",
            "new_password2": "another long secret 42",
        },
    )

    assert (response.status_code, response["Location"]) == (302, "/accounts/password/")
    confirmation = client.get(response["Location"]).content.decode()
    assert "Your password was changed; your API tokens are revoked." in confirmation
    owner.refresh_from_db()
    assert owner.check_password("another long secret 42")
    assert client.get("/").status_code == 200
    assert async_to_sync(layer.receive)(channel)["code"] == 4401


def test_password_change_old_password_guesses_are_locked_out(client: Client, owner: Any) -> None:
    client.force_login(owner)
    new = {"new_password1": "another long secret 42", "new_password2": "another long secret 42"}
    guesses = [
        client.post("/accounts/password/", {"old_password": f"guess {n}", **new}) for n in range(5)
    ]
    assert [g.status_code for g in guesses] == [200, 200, 200, 200, 429]
    assert b"Your old password was entered incorrectly." in guesses[0].content

    response = client.post(
        "/accounts/password/", {"old_password": "correct horse battery staple", **new}
    )

    assert response.status_code == 429
    owner.refresh_from_db()
    assert owner.check_password("correct horse battery staple")


def test_account_delete_needs_the_typed_confirmation(client: Client, owner: Any) -> None:
    client.force_login(owner)

    response = client.post(
        "/accounts/delete/", {"password": "correct horse battery staple", "confirm": "yes"}
    )

    assert response.status_code == 200
    assert b"DELETE" in response.content
    assert get_user_model().objects.filter(pk=owner.pk).exists()


def test_account_delete_with_confirmation_deletes_and_signs_out(client: Client, owner: Any) -> None:
    client.force_login(owner)

    response = client.post(
        "/accounts/delete/", {"password": "correct horse battery staple", "confirm": "DELETE"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/accounts/deleted/"
    assert not get_user_model().objects.filter(pk=owner.pk).exists()
    assert "_auth_user_id" not in client.session


def test_account_delete_password_guesses_are_locked_out_like_sign_ins(
    client: Client, owner: Any
) -> None:
    client.force_login(owner)
    guesses = [
        client.post("/accounts/delete/", {"password": f"guess {n}", "confirm": "DELETE"})
        for n in range(5)
    ]
    # AXES_FAILURE_LIMIT (5): the fifth failure already answers with the lockout page.
    assert [g.status_code for g in guesses] == [200, 200, 200, 200, 429]
    assert b"That is not your password." in guesses[0].content

    response = client.post(
        "/accounts/delete/", {"password": "correct horse battery staple", "confirm": "DELETE"}
    )

    assert response.status_code == 429
    assert b"Too many failed sign-ins" in response.content
    assert get_user_model().objects.filter(pk=owner.pk).exists()


def test_form_post_with_null_origin_passes_when_the_browser_says_same_origin(
    owner: Any,
) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.get("/accounts/login/")
    token = strict.cookies["csrftoken"].value
    form = {"username": "owner", "password": "correct horse battery staple"}
    form["csrfmiddlewaretoken"] = token

    same_origin = strict.post(
        "/accounts/login/", form, HTTP_ORIGIN="null", HTTP_SEC_FETCH_SITE="same-origin"
    )
    cross_site = Client(enforce_csrf_checks=True)
    cross_site.cookies["csrftoken"] = token
    refused = cross_site.post(
        "/accounts/login/", form, HTTP_ORIGIN="null", HTTP_SEC_FETCH_SITE="cross-site"
    )

    assert same_origin.status_code == 302
    assert refused.status_code == 403
