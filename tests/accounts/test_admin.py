"""Invitations from the admin: the link is shown once, only its hash is stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
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
