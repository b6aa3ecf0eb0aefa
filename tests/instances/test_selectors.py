"""Only members see an instance; owners and admins administer it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from instances.selectors import (
    instance_get_for_user,
    instances_administered_by,
    user_can_administer,
)
from instances.services import instance_member_set
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_members_see_the_instance_and_others_do_not(instance, owner, stranger):
    member = UserFactory()
    instance_member_set(instance=instance, user=member, role="member")

    assert instance_get_for_user(slug="demo", user=owner) == instance
    assert instance_get_for_user(slug="demo", user=member) == instance
    assert instance_get_for_user(slug="demo", user=stranger) is None
    assert instance_get_for_user(slug="demo", user=AnonymousUser()) is None
    assert instance_get_for_user(slug="nope", user=owner) is None


def test_only_owners_admins_and_superusers_administer(instance, other_instance, owner, stranger):
    admin, member = UserFactory(), UserFactory()
    root = UserFactory(is_superuser=True, is_staff=True)
    instance_member_set(instance=instance, user=admin, role="admin")
    instance_member_set(instance=instance, user=member, role="member")

    assert list(instances_administered_by(user=owner)) == [instance]
    assert list(instances_administered_by(user=admin)) == [instance]
    assert list(instances_administered_by(user=member)) == []
    assert list(instances_administered_by(user=stranger)) == [other_instance]
    assert set(instances_administered_by(user=root)) == {instance, other_instance}
    assert user_can_administer(instance=instance, user=admin) is True
    assert user_can_administer(instance=instance, user=member) is False
    assert user_can_administer(instance=instance, user=stranger) is False
