"""Sign-in and sign-up refuse hostile input as form errors, never as a server error."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from instances.models import Instance

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a long passphrase 17"


def _sign_up(client: Client, username: str, password: str = PASSWORD) -> Any:
    return client.post(
        "/accounts/signup/",
        {
            "username": username,
            "email": "someone@example.test",
            "password1": password,
            "password2": password,
        },
    )


def test_sign_in_with_a_300_character_username_is_a_form_error(client: Client) -> None:
    response = client.post("/accounts/login/", {"username": "u" * 300, "password": "wrong"})

    assert response.status_code == 200
    assert b"at most 150 characters" in response.content
    assert "_auth_user_id" not in client.session


def test_sign_in_with_a_300_character_username_still_counts_towards_the_lockout(
    client: Client, owner: Any
) -> None:
    for _ in range(3):
        client.post("/accounts/login/", {"username": "u" * 300, "password": "wrong"})
    response = client.post(
        "/accounts/login/", {"username": "owner", "password": "correct horse battery staple"}
    )
    # A long name is not the owner's name: the owner can still sign in.
    assert response.status_code == 302


def test_admin_sign_in_with_a_300_character_username_is_counted_not_a_500(
    client: Client,
) -> None:
    from axes.models import AccessAttempt

    response = client.post("/admin/login/", {"username": "u" * 300, "password": "wrong"})

    assert response.status_code == 200
    assert list(AccessAttempt.objects.values_list("username", flat=True)) == ["u" * 255]


@pytest.mark.parametrize(
    "username",
    ["<script>", "alice\u200b", "   bob   x", "x" * 151, "caf\u00e9 bar"],
)
def test_sign_up_applies_the_user_models_username_rules(
    client: Client, open_instance: Instance, username: str
) -> None:
    response = _sign_up(client, username)

    assert response.status_code == 200
    assert b'role="alert"' in response.content
    assert get_user_model().objects.count() == 0


def test_sign_up_refuses_a_username_differing_only_by_case_or_normalisation(
    client: Client, open_instance: Instance
) -> None:
    assert _sign_up(client, "Ada").status_code == 302
    other = Client()
    for look_alike in ("ada", "\uff21\uff24\uff21", "ADA"):
        response = _sign_up(other, look_alike)
        assert response.status_code == 200
        assert b"This username is taken." in response.content
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["Ada"]


def test_sign_up_refuses_an_overlong_password_with_a_clear_error(
    client: Client, open_instance: Instance
) -> None:
    response = _sign_up(client, "ada", password="p" * 1025)

    assert response.status_code == 200
    assert b"at most 1024 characters" in response.content
    assert not get_user_model().objects.filter(username="ada").exists()


def test_sign_up_accepts_a_password_of_the_maximum_length(
    client: Client, open_instance: Instance
) -> None:
    assert _sign_up(client, "ada", password="correct horse " + "p" * 1010).status_code == 302


@pytest.mark.parametrize(
    ("username", "scripts"),
    [
        ("dem\u043e", "Cyrillic and Latin"),
        ("d\u0435m\u043e", "Cyrillic and Latin"),
        ("\u03a9mega", "Greek and Latin"),
    ],
)
def test_sign_up_refuses_a_username_mixing_scripts(
    client: Client, open_instance: Instance, username: str, scripts: str
) -> None:
    response = _sign_up(client, username)

    assert response.status_code == 200
    assert (
        f"Write the username in one script: this one mixes {scripts} letters."
    ).encode() in response.content
    assert get_user_model().objects.count() == 0


def test_sign_up_refuses_a_username_that_reads_like_an_existing_one(
    client: Client, open_instance: Instance
) -> None:
    assert _sign_up(client, "pop").status_code == 302

    cyrillic = _sign_up(Client(), "\u0440\u043e\u0440")
    greek = _sign_up(Client(), "\u03bf")
    japanese = _sign_up(Client(), "\u5c71\u7530\u305f\u308d\u3046")
    digits = _sign_up(Client(), "p0p")

    assert b"This username looks the same as an existing one; choose another." in cyrillic.content
    assert greek.status_code == 302
    assert japanese.status_code == 302
    assert digits.status_code == 302
    assert sorted(get_user_model().objects.values_list("username", flat=True)) == sorted(
        ["pop", "\u03bf", "\u5c71\u7530\u305f\u308d\u3046", "p0p"]
    )
