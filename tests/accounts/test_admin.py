"""Invitations from the admin: the link is shown once, only its hash is stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.test import Client

from accounts.models import Invitation
from accounts.selectors import invitation_get_usable, signup_target_get
from instances.models import Instance
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_admin_creates_an_invitation_and_shows_its_link_once(client: Client) -> None:
    admin: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    lab = Instance.objects.create(slug="lab", name="Lab")
    client.force_login(admin)

    response = client.post(
        "/admin/accounts/invitation/add/", {"instance": lab.pk, "email": "new@example.test"}
    )

    assert response.status_code == 302
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    token = re.search(r"/accounts/signup/\?invite=([\w-]+)", shown)
    assert token is not None
    invitation = Invitation.objects.get()
    assert invitation.email == "new@example.test"
    assert invitation.created_by == admin
    assert token.group(1) not in invitation.token_hash
    assert invitation_get_usable(token=token.group(1)) == invitation
    assert signup_target_get(invitation_token=token.group(1)).instance == lab


def test_the_admin_refuses_to_add_or_rename_a_user_to_a_look_alike(client: Client) -> None:
    admin: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    demo: Any = UserFactory(username="demo")
    client.force_login(admin)
    password = "a long passphrase 17"

    mixed = client.post(
        "/admin/auth/user/add/",
        {
            "username": "dem\u043e",
            "usable_password": "true",
            "password1": password,
            "password2": password,
        },
    )
    look_alike = client.post(
        "/admin/auth/user/add/",
        {
            "username": "\u0440\u043e\u0440",
            "usable_password": "true",
            "password1": password,
            "password2": password,
        },
    )
    UserFactory(username="pop")
    renamed = client.post(
        f"/admin/auth/user/{demo.pk}/change/",
        {
            "username": "\u0440\u043e\u0440",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
            "is_active": "on",
        },
    )

    assert "this one mixes Cyrillic and Latin letters" in mixed.content.decode()
    assert look_alike.status_code == 302
    assert "looks the same as an existing one" in renamed.content.decode()
    demo.refresh_from_db()
    assert demo.username == "demo"


def test_the_admin_refuses_a_name_equal_to_another_but_for_case(client: Client) -> None:
    admin: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    UserFactory(username="mallory")
    client.force_login(admin)
    password = "a long passphrase 17"

    answer = client.post(
        "/admin/auth/user/add/",
        {
            "username": "Mallory",
            "usable_password": "true",
            "password1": password,
            "password2": password,
        },
    )

    assert answer.status_code == 200
    assert "A user with that username already exists." in answer.content.decode()
    assert not User.objects.filter(username="Mallory").exists()
