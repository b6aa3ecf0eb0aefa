"""API tokens: stored as a digest, Bearer authentication on /api/, the commands, the admin."""

from __future__ import annotations

import hashlib
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.selectors import api_token_get_usable, api_token_user
from accounts.services import (
    ApiTokenInvalidError,
    api_token_create,
    api_token_revoke,
    api_token_socket_group,
    api_token_touch,
)
from chats import services as chat_services
from chats.models import Chat
from pipeline.ids import new_id
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN_RE = re.compile(r"om_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")
CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _assert_invalid_token(response: Any) -> None:
    assert response.status_code == 401
    assert response.json() == {
        "code": "invalid_token",
        "message": "The API token is malformed, unknown, revoked or expired.",
    }
    assert response["WWW-Authenticate"] == 'Bearer realm="api", error="invalid_token"'


# --- storage and lookup -----------------------------------------------------------------


def test_only_the_digest_is_stored_never_the_token(owner: Any) -> None:
    token, raw = api_token_create(user=owner, name="laptop")

    assert TOKEN_RE.fullmatch(raw)
    prefix, secret = raw[3:15], raw[16:]
    assert token.prefix == prefix
    assert token.digest == hashlib.sha256(raw.encode()).hexdigest()
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    stored = " ".join(str(value) for value in row.values())
    assert raw not in stored
    assert secret not in stored


def test_a_token_names_its_user_until_revoked(owner: Any) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    assert api_token_user(raw) == owner

    api_token_revoke(token=token)

    assert token.revoked_at is not None
    assert api_token_user(raw) is None


def test_revoking_twice_keeps_the_first_time(owner: Any) -> None:
    token, _ = api_token_create(user=owner, name="laptop")
    first = api_token_revoke(token=token).revoked_at
    again = api_token_revoke(token=ApiToken.objects.get(pk=token.pk)).revoked_at
    assert first is not None
    assert again == first


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "om_",
        "Bearer om_0123456789ab_" + "a" * 43,
        "om_0123456789AB_" + "a" * 43,  # upper-case prefix
        "om_0123456789ab_" + "a" * 42,  # secret one short
        "om_0123456789ab_" + "a" * 43 + "\n",
        "om_0123456789ab_" + "a" * 42 + "é",
    ],
)
def test_malformed_tokens_name_nobody(owner: Any, raw: str) -> None:
    api_token_create(user=owner, name="laptop")
    assert api_token_user(raw) is None


def test_a_wrong_secret_under_a_known_prefix_names_nobody(owner: Any) -> None:
    token, raw = api_token_create(user=owner, name="laptop")
    forged = f"om_{token.prefix}_{'A' * 43}"
    assert forged != raw
    assert api_token_get_usable(forged) is None


def test_expired_tokens_and_inactive_users_name_nobody(owner: Any, stranger: Any) -> None:
    expiring, raw_expiring = api_token_create(
        user=owner, name="ci", expires_at=timezone.now() + timedelta(days=1)
    )
    _, raw_inactive = api_token_create(user=stranger, name="bot")
    assert api_token_user(raw_expiring) == owner
    assert api_token_user(raw_inactive) == stranger

    ApiToken.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    stranger.is_active = False
    stranger.save(update_fields=["is_active"])

    assert api_token_user(raw_expiring) is None
    assert api_token_user(raw_inactive) is None


@pytest.mark.parametrize(
    ("name", "expires_in", "error"),
    [
        ("   ", timedelta(days=1), "A token name is 1 to 100 characters."),
        ("x" * 101, timedelta(days=1), "A token name is 1 to 100 characters."),
        ("ci", timedelta(seconds=-1), "A token's expiry must be in the future."),
    ],
)
def test_bad_names_and_past_expiries_are_refused(
    owner: Any, name: str, expires_in: timedelta, error: str
) -> None:
    with pytest.raises(ApiTokenInvalidError, match=re.escape(error)):
        api_token_create(user=owner, name=name, expires_at=timezone.now() + expires_in)
    assert not ApiToken.objects.exists()


def test_last_used_is_written_at_most_once_a_minute(owner: Any) -> None:
    token, _ = api_token_create(user=owner, name="laptop")
    assert token.last_used_at is None

    assert api_token_touch(token=token) is True
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    assert api_token_touch(token=ApiToken.objects.get(pk=token.pk)) is False
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first

    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    stale = ApiToken.objects.get(pk=token.pk)
    assert api_token_touch(token=stale) is True
    touched = ApiToken.objects.get(pk=token.pk).last_used_at
    assert touched is not None
    assert touched > first
    assert stale.last_used_at == touched


def test_revoking_tells_the_tokens_socket_group_to_close(owner: Any) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    token, _ = api_token_create(user=owner, name="laptop")
    layer: Any = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(api_token_socket_group(token.pk), channel)

    api_token_revoke(token=token)

    assert async_to_sync(layer.receive)(channel) == {"type": "session.ended", "code": 4401}


# --- REST ---------------------------------------------------------------------------------


def test_a_bearer_token_lists_its_users_chats(
    keyed_owner: Any, stranger: Any, chat_instance: Any
) -> None:
    chat = chat_services.chat_create(
        user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )
    token, raw = api_token_create(user=keyed_owner, name="cli")
    _, stranger_raw = api_token_create(user=stranger, name="cli")

    mine = _bearer(raw).get("/api/chats/")
    theirs = _bearer(stranger_raw).get("/api/chats/")

    assert mine.status_code == 200
    assert [c["chat_id"] for c in mine.json()["results"]] == [chat.pk]
    assert theirs.status_code == 200
    assert theirs.json()["results"] == []
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


def test_a_session_write_without_csrf_token_is_csrf_failed(
    keyed_owner: Any, chat_instance: Any
) -> None:
    from instances.models import InstanceMember

    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(keyed_owner)

    response = client.post(
        "/api/chats/",
        {"chat_id": new_id(), "instance": chat_instance.slug, "encrypted_chat_key": CHAT_KEY},
        format="json",
    )

    assert response.status_code == 403
    assert response.json()["code"] == "csrf_failed"
    assert response.json()["message"].startswith("CSRF Failed:")
    assert not Chat.objects.filter(owner=keyed_owner).exists()


def test_a_bearer_token_writes_without_csrf(keyed_owner: Any, chat_instance: Any) -> None:
    from instances.models import InstanceMember

    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    _, raw = api_token_create(user=keyed_owner, name="cli")
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    chat_id = new_id()

    response = client.post(
        "/api/chats/",
        {"chat_id": chat_id, "instance": chat_instance.slug, "encrypted_chat_key": CHAT_KEY},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["chat_id"] == chat_id
    assert Chat.objects.get(pk=chat_id).owner == keyed_owner


def test_bearer_scheme_is_case_insensitive(owner: Any) -> None:
    _, raw = api_token_create(user=owner, name="cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"bearer {raw}")
    assert client.get("/api/chats/").status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer om_nothing",
        "Bearer om_0123456789ab_" + "a" * 43,  # well-formed, unknown
        "Bearer two parts",
    ],
)
def test_a_bad_bearer_header_answers_401_invalid_token(owner: Any, header: str) -> None:
    api_token_create(user=owner, name="cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    _assert_invalid_token(client.get("/api/chats/"))


def test_revoked_expired_and_inactive_tokens_answer_401(owner: Any, stranger: Any) -> None:
    revoked, raw_revoked = api_token_create(user=owner, name="old")
    expired, raw_expired = api_token_create(
        user=owner, name="ci", expires_at=timezone.now() + timedelta(hours=1)
    )
    _, raw_inactive = api_token_create(user=stranger, name="bot")
    api_token_revoke(token=revoked)
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    stranger.is_active = False
    stranger.save(update_fields=["is_active"])

    for raw in (raw_revoked, raw_expired, raw_inactive):
        _assert_invalid_token(_bearer(raw).get("/api/chats/"))


def test_the_session_is_tried_first_and_a_bad_token_is_never_anonymous(owner: Any) -> None:
    client = APIClient()
    client.force_login(owner)
    client.credentials(HTTP_AUTHORIZATION="Bearer om_0123456789ab_" + "a" * 43)
    # SessionAuthentication comes first: a signed-in browser with a stray header still works.
    assert client.get("/api/chats/").status_code == 200
    client.logout()  # (APIClient.logout also drops the credentials)
    client.credentials(HTTP_AUTHORIZATION="Bearer om_0123456789ab_" + "a" * 43)
    _assert_invalid_token(client.get("/api/chats/"))


def test_without_credentials_the_api_answers_401_with_the_bearer_challenge(db: Any) -> None:
    answer = APIClient().get("/api/chats/")
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"].startswith("Bearer")


# --- management commands -----------------------------------------------------------------


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_api_key_prints_a_token_that_authenticates(owner: Any) -> None:
    out, err = _run("create_api_key", "--user", "owner", "--name", "deploy", "--expires-days", "7")

    raw = out.strip()
    assert TOKEN_RE.fullmatch(raw)
    token = ApiToken.objects.get()
    assert (token.name, token.user, token.prefix) == ("deploy", owner, raw[3:15])
    assert token.expires_at is not None
    remaining = token.expires_at - timezone.now()
    assert timedelta(days=6, hours=23) < remaining <= timedelta(days=7)
    assert f"prefix {token.prefix}" in err
    assert raw not in err
    assert api_token_user(raw) == owner
    assert _bearer(raw).get("/api/chats/").status_code == 200


def test_create_api_key_without_expiry(owner: Any) -> None:
    out, err = _run("create_api_key", "--user", "owner", "--name", "laptop")
    assert ApiToken.objects.get().expires_at is None
    assert "no expiry" in err
    assert api_token_user(out.strip()) == owner


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--user", "ghost", "--name", "x"], "no user 'ghost'"),
        (["--user", "owner", "--name", " "], "A token name is 1 to 100 characters."),
        (["--user", "owner", "--name", "x", "--expires-days", "0"], "--expires-days"),
        (["--user", "owner", "--name", "x", "--expires-days", "soon"], "--expires-days"),
    ],
)
def test_create_api_key_refuses_bad_input(owner: Any, args: list[str], error: str) -> None:
    with pytest.raises(CommandError, match=re.escape(error)):
        _run("create_api_key", *args)
    assert not ApiToken.objects.exists()


def test_create_api_key_refuses_an_inactive_user(db: Any) -> None:
    UserFactory(username="gone", is_active=False)
    with pytest.raises(CommandError, match="user 'gone' is inactive"):
        _run("create_api_key", "--user", "gone", "--name", "x")


def test_revoke_api_key_by_prefix_or_whole_token(owner: Any) -> None:
    first, raw_first = api_token_create(user=owner, name="one")
    second, raw_second = api_token_create(user=owner, name="two")

    out, _ = _run("revoke_api_key", first.prefix)
    assert out.strip() == f"API token 'one' ({first.prefix}) of owner revoked"
    out, _ = _run("revoke_api_key", raw_second)
    assert out.strip() == f"API token 'two' ({second.prefix}) of owner revoked"
    out, _ = _run("revoke_api_key", first.prefix)
    assert out.strip() == f"API token 'one' ({first.prefix}) of owner was already revoked"

    assert api_token_user(raw_first) is None
    assert api_token_user(raw_second) is None
    with pytest.raises(CommandError, match="no API token with prefix '000000000000'"):
        _run("revoke_api_key", "000000000000")


# --- admin --------------------------------------------------------------------------------


def test_admin_lists_tokens_without_digests_and_revokes_them(client: Client, owner: Any) -> None:
    admin: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    token, raw = api_token_create(user=owner, name="laptop")
    client.force_login(admin)

    listing = client.get("/admin/accounts/apitoken/")
    detail = client.get(f"/admin/accounts/apitoken/{token.pk}/change/")
    refused_add = client.get("/admin/accounts/apitoken/add/")
    revoked = client.post(
        "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}
    )

    assert listing.status_code == 200
    assert token.prefix in listing.content.decode()
    assert detail.status_code == 200
    for page in (listing, detail):
        assert token.digest not in page.content.decode()
        assert raw not in page.content.decode()
    assert b'name="name"' not in detail.content
    assert refused_add.status_code == 403
    assert revoked.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert api_token_user(raw) is None
