"""DELETE /api/account/ checks the password at most 5 times a minute per user (429 after)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's


def _browser(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _delete(client: APIClient, password: str) -> Any:
    return client.delete("/api/account/", {"password": password}, format="json")


def test_the_sixth_password_guess_in_a_minute_is_throttled(owner: Any) -> None:
    client = _browser(owner)
    guesses = [_delete(client, f"guess {n}") for n in range(5)]
    assert [g.status_code for g in guesses] == [403] * 5
    assert guesses[0].json() == {"code": "permission_denied", "message": "wrong password"}

    # Even the right password waits: the limit is on checks, not on failures.
    throttled = _delete(client, PASSWORD)

    assert throttled.status_code == 429
    body = throttled.json()
    assert body["code"] == "throttled"
    assert set(body) == {"code", "message", "retry_after"}
    assert 1 <= body["retry_after"] <= 60
    assert throttled["Retry-After"] == str(body["retry_after"])
    assert get_user_model().objects.filter(pk=owner.pk).exists()


def test_the_limit_is_per_user(owner: Any) -> None:
    other: Any = UserFactory(username="other")
    for n in range(5):
        _delete(_browser(owner), f"guess {n}")
    assert _delete(_browser(owner), "again").status_code == 429

    answer = _delete(_browser(other), PASSWORD)

    assert answer.status_code == 204
    assert not get_user_model().objects.filter(pk=other.pk).exists()


@pytest.mark.parametrize("run", ["first", "second"])
def test_throttle_counts_do_not_leak_into_the_next_test(db: Any, run: str) -> None:
    # The same user id both times (the table is emptied between the runs): the second run
    # starts at zero only because tests/conftest.py clears the counters before each test.
    user: Any = UserFactory(id=990_001, username=f"same-id-{run}")
    client = _browser(user)
    assert [_delete(client, "wrong").status_code for _ in range(5)] == [403] * 5
    assert _delete(client, "wrong").status_code == 429
