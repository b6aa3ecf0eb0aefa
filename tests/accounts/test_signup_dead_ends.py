"""Sign-up on an invitation-only server says what to do: the pages that lead to it, a
used, expired or unknown invitation, and ``manage.py invite``."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from accounts.models import Invitation
from accounts.services import invitation_create, user_sign_up
from instances.models import Instance

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a long passphrase 17"


def _problem(client: Client, token: str) -> str:
    page = client.get(f"/accounts/signup/?invite={token}").content.decode()
    match = re.search(r'data-testid="invitation-problem">([^<]*)', page)
    return match.group(1) if match else ""


def test_a_used_invitation_says_already_used(client: Client, default_instance: Instance) -> None:
    _, token = invitation_create(instance=default_instance, created_by=None)
    user_sign_up(
        username="ada", email="ada@example.test", password=PASSWORD, invitation_token=token
    )

    assert _problem(client, token).startswith("This invitation has already been used.")


def test_an_expired_invitation_says_expired(client: Client, default_instance: Instance) -> None:
    invitation, token = invitation_create(instance=default_instance, created_by=None)
    Invitation.objects.filter(pk=invitation.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )

    assert _problem(client, token).startswith("This invitation has expired.")


def _heading(page: str) -> str:
    match = re.search(r'data-testid="signup-heading">([^<]*)', page)
    return match.group(1) if match else ""


def test_a_used_invitation_opened_signed_in_leads_back_to_the_app(
    client: Client, default_instance: Instance
) -> None:
    _, token = invitation_create(instance=default_instance, created_by=None)
    ada = user_sign_up(
        username="ada", email="ada@example.test", password=PASSWORD, invitation_token=token
    )
    client.force_login(ada)

    page = client.get(f"/accounts/signup/?invite={token}").content.decode()

    assert _heading(page) == "Invitation already used"
    assert _problem(client, token) == (
        "This invitation has already been used. Each invitation link creates one account."
    )
    assert "You are signed in as <strong>ada</strong>." in page
    assert '<a class="button-primary" href="/" data-testid="back-to-app">' in page
    assert "/accounts/login/" not in page
    assert 'name="password1"' not in page


def test_an_expired_invitation_opened_signed_in_says_expired_and_leads_back(
    client: Client, open_instance: Instance
) -> None:
    invitation, token = invitation_create(instance=open_instance, created_by=None)
    Invitation.objects.filter(pk=invitation.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    bea = user_sign_up(username="bea", email="bea@example.test", password=PASSWORD)
    client.force_login(bea)

    page = client.get(f"/accounts/signup/?invite={token}").content.decode()

    # Even where sign-up is open, a signed-in user gets no form and no sign-in link.
    assert _heading(page) == "Invitation expired"
    assert _problem(client, token).startswith("This invitation has expired.")
    assert 'data-testid="back-to-app"' in page
    assert "/accounts/login/" not in page
    assert 'name="password1"' not in page


def test_a_signed_in_post_creates_no_account(client: Client, default_instance: Instance) -> None:
    _, token = invitation_create(instance=default_instance, created_by=None)
    bea = get_user_model().objects.create_user(username="bea", password=PASSWORD)
    client.force_login(bea)
    form = {
        "username": "cy",
        "email": "cy@example.test",
        "password1": PASSWORD,
        "password2": PASSWORD,
        "invite": token,
    }

    page = client.post("/accounts/signup/", form).content.decode()

    assert _heading(page) == "You are already signed in"
    assert not get_user_model().objects.filter(username="cy").exists()
    assert Invitation.objects.get().used_at is None


def test_an_unknown_invitation_says_not_valid(client: Client, default_instance: Instance) -> None:
    assert _problem(client, "not-a-real-token").startswith("This invitation link is not valid")


def test_a_usable_invitation_shows_the_form_and_no_problem(
    client: Client, default_instance: Instance
) -> None:
    _, token = invitation_create(instance=default_instance, created_by=None)

    page = client.get(f"/accounts/signup/?invite={token}").content.decode()

    assert 'name="password1"' in page
    assert "invitation-problem" not in page


def test_sign_in_and_deleted_pages_say_invitation_only_instead_of_linking_to_sign_up(
    client: Client, default_instance: Instance
) -> None:
    login = client.get("/accounts/login/").content.decode()
    deleted = client.get("/accounts/deleted/").content.decode()

    assert "by invitation only: ask its administrator for an invitation link" in login
    assert 'href="/accounts/signup/"' not in login
    assert "by invitation only: to come back, ask its administrator" in deleted
    assert 'href="/accounts/signup/"' not in deleted


def test_an_open_server_links_to_sign_up(client: Client, open_instance: Instance) -> None:
    login = client.get("/accounts/login/").content.decode()
    deleted = client.get("/accounts/deleted/").content.decode()

    assert '<a href="/accounts/signup/">Sign up</a>' in login
    assert '<a href="/accounts/signup/">Create a new account</a>' in deleted


def test_the_closed_sign_up_page_says_how_invitations_are_made(
    client: Client, default_instance: Instance
) -> None:
    page = client.get("/accounts/signup/").content.decode()

    assert "Ask the administrator of this server for an invitation link" in page
    assert "python manage.py invite --instance SLUG" in page


def test_manage_py_invite_prints_a_working_link_once(
    client: Client, default_instance: Instance
) -> None:
    out, err = io.StringIO(), io.StringIO()

    call_command(
        "invite",
        "--instance",
        "home",
        "--email",
        "Bo@Example.test",
        "--days",
        "3",
        "--base-url",
        "https://chat.example.test/",
        stdout=out,
        stderr=err,
    )

    link = out.getvalue().strip()
    assert link.startswith("https://chat.example.test/accounts/signup/?invite=")
    invitation = Invitation.objects.get()
    assert (invitation.instance, invitation.email) == (default_instance, "bo@example.test")
    assert timedelta(days=2, hours=23) < invitation.expires_at - timezone.now() <= timedelta(days=3)
    assert "Invitation to Home for bo@example.test" in err.getvalue()
    page = client.get(link.removeprefix("https://chat.example.test")).content.decode()
    assert "You will join <strong>Home</strong>" in page


def test_manage_py_invite_links_to_the_served_address_by_default(
    default_instance: Instance, settings: Any
) -> None:
    settings.OPENMATES_URL = "http://127.0.0.1:8797"
    out = io.StringIO()

    call_command("invite", "--instance", "home", stdout=out, stderr=io.StringIO())

    assert out.getvalue().startswith("http://127.0.0.1:8797/accounts/signup/?invite=")


def test_manage_py_invite_refuses_an_unknown_instance(default_instance: Instance) -> None:
    with pytest.raises(CommandError, match="no instance 'nope'"):
        call_command("invite", "--instance", "nope", stdout=io.StringIO())


@pytest.mark.parametrize("days", ["0", "-2", "two"])
def test_manage_py_invite_refuses_days_that_are_not_a_positive_number_plainly(
    default_instance: Instance, days: str
) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("invite", "--instance", "home", "--days", days, stdout=io.StringIO())

    assert str(refused.value) == (
        f"Error: argument --days: the number of days must be a whole number, 1 or more "
        f"(not {days!r})"
    )
    assert not Invitation.objects.exists()


@pytest.mark.parametrize("email", ["notanemail", "a@", "two@@example.test"])
def test_manage_py_invite_refuses_what_is_not_an_email_address(
    default_instance: Instance, email: str
) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("invite", "--instance", "home", "--email", email, stdout=io.StringIO())

    assert str(refused.value) == f"--email {email!r} is not an e-mail address (name@example.org)."
    assert not Invitation.objects.exists()


def test_favicon_is_served(client: Client) -> None:
    response = client.get("/favicon.ico")

    assert (response.status_code, response["Content-Type"]) == (200, "image/x-icon")
    assert response.getvalue()[:4] == b"\x00\x00\x01\x00"


def test_invitations_and_policies_read_as_their_instance_name(default_instance: Instance) -> None:
    from accounts.models import SignupPolicy

    invitation, _ = invitation_create(
        instance=default_instance, created_by=None, email="bo@example.test"
    )
    policy = SignupPolicy.objects.create(instance=default_instance, open_signup=False)

    until = f"{invitation.expires_at:%Y-%m-%d}"
    assert str(invitation) == f"Invitation to Home for bo@example.test (until {until})"
    assert str(policy) == "Sign-up to Home: by invitation"


def test_the_app_config_names_each_instances_model_and_whether_it_can_use_tools(
    client: Client, owner: Any, settings: Any
) -> None:
    import json

    from instances.services import instance_create

    settings.LLM_DEFAULT_TIERS = {"standard": [{"model": "text-completion-openai/gemma-3-270m"}]}
    instance_create(slug="bundled", name="Bundled", owner=owner)
    hosted = instance_create(slug="hosted", name="Hosted", owner=owner)
    hosted.tier_map = {"standard": [{"model": "openai/gpt-4o-mini"}]}
    hosted.save(update_fields=["tier_map"])
    client.force_login(owner)

    page = client.get("/").content.decode()
    found = re.search(r'id="app-config" type="application/json">(.*?)</script>', page)
    assert found is not None
    config = json.loads(found[1])

    by_slug = {entry["slug"]: entry for entry in config["instances"]}
    assert by_slug["bundled"]["modelLabel"] == "Gemma 3 270M (bundled)"
    assert by_slug["bundled"]["toolsAvailable"] is False
    assert (by_slug["hosted"]["modelLabel"], by_slug["hosted"]["toolsAvailable"]) == (
        "gpt-4o-mini",
        True,
    )
    assert config["modelLabels"] == {
        "openai/gpt-4o-mini": "gpt-4o-mini",
        "text-completion-openai/gemma-3-270m": "Gemma 3 270M (bundled)",
    }


def test_an_invitation_without_an_address_signs_up_without_one(
    client: Client, default_instance: Instance
) -> None:
    _, token = invitation_create(instance=default_instance, created_by=None)

    response = client.post(
        f"/accounts/signup/?invite={token}",
        {"username": "noaddr", "password1": PASSWORD, "password2": PASSWORD, "invite": token},
    )

    assert response.status_code == 302
    user = get_user_model().objects.get(username="noaddr")
    assert user.email == ""
    assert default_instance.members.filter(user=user).exists()


def test_an_invitation_for_an_address_asks_for_it(
    client: Client, default_instance: Instance
) -> None:
    _, token = invitation_create(
        instance=default_instance, created_by=None, email="bo@example.test"
    )
    form = {"username": "bo", "password1": PASSWORD, "password2": PASSWORD, "invite": token}

    refused = client.post(f"/accounts/signup/?invite={token}", form).content.decode()
    accepted = client.post(
        f"/accounts/signup/?invite={token}", {**form, "email": "Bo@example.test"}
    )

    assert "This invitation was made for an e-mail address: enter it to sign up." in refused
    assert accepted.status_code == 302
    assert get_user_model().objects.get(username="bo").email == "Bo@example.test"
