"""API token limits and lifetime: at most API_TOKEN_CREATE_PER_HOUR creations an hour and
API_TOKEN_ACTIVE_MAX active tokens per user, even under concurrent requests; a password
change, wherever it is made, revokes all of the user's tokens and closes their sockets."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.hashers import make_password
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.selectors import api_token_user
from accounts.services import (
    API_TOKEN_ACTIVE_MAX,
    API_TOKEN_CREATE_PER_HOUR,
    ApiTokenLimitError,
    api_token_create,
    api_token_revoke,
    api_token_socket_group,
)
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"
NEW_PASSWORD = "another long secret 42"


def _backdate(token: ApiToken, hours: float) -> None:
    ApiToken.objects.filter(pk=token.pk).update(created_at=timezone.now() - timedelta(hours=hours))


def _made_earlier(user: Any, count: int, *, hours: float = 2) -> list[ApiToken]:
    """``count`` active tokens of ``user`` made ``hours`` ago (outside the hourly limit)."""
    tokens = []
    for n in range(count):
        token, _ = api_token_create(user=user, name=f"earlier {n}")
        _backdate(token, hours)
        tokens.append(token)
    return tokens


# --- creation limits ----------------------------------------------------------------------


def test_creation_past_the_hourly_limit_is_refused_with_the_wait(owner: Any) -> None:
    first, _ = api_token_create(user=owner, name="first")
    _backdate(first, 0.5)
    for n in range(API_TOKEN_CREATE_PER_HOUR - 1):
        api_token_create(user=owner, name=f"script {n}")

    with pytest.raises(ApiTokenLimitError) as refused:
        api_token_create(user=owner, name="one more")

    # The oldest creation of the hour leaves the window in 30 minutes.
    assert refused.value.retry_after is not None
    assert 1740 <= refused.value.retry_after <= 1800
    assert str(refused.value) == (
        f"You created {API_TOKEN_CREATE_PER_HOUR} API tokens in the last hour, the most "
        "allowed; try again in 30 minutes."
    )
    assert ApiToken.objects.count() == API_TOKEN_CREATE_PER_HOUR


def test_revoked_tokens_still_count_towards_the_hourly_limit(owner: Any) -> None:
    for n in range(API_TOKEN_CREATE_PER_HOUR):
        token, _ = api_token_create(user=owner, name=f"script {n}")
        api_token_revoke(token=token)

    with pytest.raises(ApiTokenLimitError):
        api_token_create(user=owner, name="one more")


def test_the_hourly_limit_is_per_user_and_an_hour_long(owner: Any, stranger: Any) -> None:
    _made_earlier(owner, API_TOKEN_CREATE_PER_HOUR, hours=1.01)

    api_token_create(user=owner, name="after the hour")
    api_token_create(user=stranger, name="someone else")

    assert ApiToken.objects.filter(user=owner).count() == API_TOKEN_CREATE_PER_HOUR + 1


def test_active_tokens_are_capped_and_revoked_or_expired_ones_make_room(owner: Any) -> None:
    tokens = _made_earlier(owner, API_TOKEN_ACTIVE_MAX)

    with pytest.raises(ApiTokenLimitError) as refused:
        api_token_create(user=owner, name="one more")
    api_token_revoke(token=tokens[0])
    api_token_create(user=owner, name="instead of the revoked one")
    ApiToken.objects.filter(pk=tokens[1].pk).update(expires_at=timezone.now())
    api_token_create(user=owner, name="instead of the expired one")

    assert refused.value.retry_after is None
    assert str(refused.value) == (
        f"You have {API_TOKEN_ACTIVE_MAX} active API tokens, the most allowed; revoke one first."
    )
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == API_TOKEN_ACTIVE_MAX + 1


def test_concurrent_creations_never_pass_the_hourly_limit(owner: Any) -> None:
    # The attack: 150 tokens in 4.5 s from parallel requests of one session.
    attempts = API_TOKEN_CREATE_PER_HOUR + 10
    start = threading.Barrier(attempts)

    def create(n: int) -> bool:
        try:
            start.wait()
            api_token_create(user=owner, name=f"parallel {n}")
        except ApiTokenLimitError:
            return False
        finally:
            connection.close()
        return True

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        outcomes = list(pool.map(create, range(attempts)))

    assert outcomes.count(True) == API_TOKEN_CREATE_PER_HOUR
    assert ApiToken.objects.filter(user=owner).count() == API_TOKEN_CREATE_PER_HOUR


def test_create_api_key_reports_the_limit(owner: Any) -> None:
    _made_earlier(owner, API_TOKEN_ACTIVE_MAX)

    with pytest.raises(CommandError, match="active API tokens, the most allowed; revoke one"):
        call_command("create_api_key", "--user", "owner", "--name", "x", stdout=io.StringIO())

    assert ApiToken.objects.count() == API_TOKEN_ACTIVE_MAX


# --- a password change revokes every token of the user ------------------------------------


def _change_in_a_shell(user: Any) -> None:
    user.set_password(NEW_PASSWORD)
    user.save()


def _change_with_changepassword(user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # ``changepassword`` reads the new password twice from the terminal.
    monkeypatch.setattr("getpass.getpass", lambda prompt="": NEW_PASSWORD)
    call_command("changepassword", user.username, stdout=io.StringIO())


def _change_on_the_account_page(user: Any) -> None:
    client = Client()
    client.force_login(user)
    response = client.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 302


def _change_in_the_admin(user: Any) -> None:
    client = Client()
    root: Any = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    response = client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302


@pytest.mark.parametrize("where", ["shell", "changepassword", "account page", "admin"])
def test_a_password_change_revokes_all_the_users_tokens_and_closes_their_sockets(
    owner: Any, stranger: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    laptop, raw_laptop = api_token_create(user=owner, name="laptop")
    _, raw_ci = api_token_create(
        user=owner, name="ci", expires_at=timezone.now() + timedelta(days=1)
    )
    _, raw_other = api_token_create(user=stranger, name="someone else's")
    layer: Any = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(api_token_socket_group(laptop.pk), channel)
    changes: dict[str, Callable[[], None]] = {
        "shell": lambda: _change_in_a_shell(owner),
        "changepassword": lambda: _change_with_changepassword(owner, monkeypatch),
        "account page": lambda: _change_on_the_account_page(owner),
        "admin": lambda: _change_in_the_admin(owner),
    }

    changes[where]()

    owner.refresh_from_db()
    assert owner.check_password(NEW_PASSWORD)
    assert ApiToken.objects.filter(user=owner, revoked_at__isnull=True).count() == 0
    assert api_token_user(raw_laptop) is None
    assert api_token_user(raw_ci) is None
    assert api_token_user(raw_other) == stranger
    assert async_to_sync(layer.receive)(channel) == {"type": "session.ended", "code": 4401}
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_laptop}")
    assert bearer.get("/api/chats/").status_code == 401


def test_a_revoked_tokens_first_revocation_time_is_kept(owner: Any) -> None:
    token, _ = api_token_create(user=owner, name="laptop")
    revoked_at = api_token_revoke(token=token).revoked_at

    _change_in_a_shell(owner)

    assert ApiToken.objects.get(pk=token.pk).revoked_at == revoked_at


def test_sign_ins_hash_upgrades_and_other_saves_keep_the_tokens(owner: Any) -> None:
    _, raw = api_token_create(user=owner, name="laptop")
    # An older hasher: the next password check re-hashes (Django saves the user), which
    # is not a password change.
    owner.password = make_password(PASSWORD, hasher="pbkdf2_sha1")
    owner.save(update_fields=["password"])
    owner.first_name = "Olive"
    owner.save()

    signed_in = Client().post("/accounts/login/", {"username": "owner", "password": PASSWORD})

    assert signed_in.status_code == 302
    owner.refresh_from_db()
    assert owner.password.startswith("pbkdf2_sha256$")
    assert api_token_user(raw) == owner
