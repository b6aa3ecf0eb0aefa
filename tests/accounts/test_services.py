"""Sign-up, invitations, closing sockets and deleting accounts (real DB, Redis, Vault)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts import services
from accounts.models import Invitation
from chats.models import UserKeys
from instances.models import Instance, InstanceMember
from openmates import vault

pytestmark = pytest.mark.django_db(transaction=True)


def _sign_up(username: str = "ada", email: str = "ada@example.test", token: str = "") -> Any:
    return services.user_sign_up(
        username=username, email=email, password="a long passphrase 17", invitation_token=token
    )


def test_open_sign_up_joins_the_default_instance_as_member(open_instance: Instance) -> None:
    user = _sign_up()

    member = InstanceMember.objects.get(user=user)
    assert member.instance == open_instance
    assert member.role == "member"
    assert user.check_password("a long passphrase 17")
    assert vault.key_latest_version(vault.user_key_name(user.pk)) == 1


def test_sign_up_without_invitation_is_refused_when_sign_up_is_closed(
    default_instance: Instance,
) -> None:
    with pytest.raises(services.SignupRefusedError, match="invitation only"):
        _sign_up()

    assert not get_user_model().objects.filter(username="ada").exists()


def test_invitation_joins_its_instance_once(default_instance: Instance, owner: Any) -> None:
    other = Instance.objects.create(slug="lab", name="Lab")
    invitation, token = services.invitation_create(instance=other, created_by=owner)

    user = _sign_up(token=token)

    slugs = InstanceMember.objects.filter(user=user).values_list("instance__slug", flat=True)
    assert list(slugs) == ["lab"]
    invitation.refresh_from_db()
    assert invitation.used_by == user
    assert invitation.token_hash != token
    with pytest.raises(services.SignupRefusedError):
        _sign_up(username="bob", email="bob@example.test", token=token)


def test_invitation_bound_to_an_address_refuses_another(
    default_instance: Instance, owner: Any
) -> None:
    _, token = services.invitation_create(
        instance=default_instance, created_by=owner, email="Grace@Example.test"
    )

    with pytest.raises(services.SignupRefusedError, match="another e-mail"):
        _sign_up(token=token)
    user = _sign_up(username="grace", email="grace@example.test", token=token)
    assert InstanceMember.objects.filter(user=user, instance=default_instance).exists()


def test_expired_invitation_is_not_usable(default_instance: Instance, owner: Any) -> None:
    invitation, token = services.invitation_create(instance=default_instance, created_by=owner)
    Invitation.objects.filter(pk=invitation.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    with pytest.raises(services.SignupRefusedError):
        _sign_up(token=token)


def test_closing_sockets_sends_session_ended_to_the_users_group(owner: Any) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(services.user_socket_group(owner.pk), channel)

    services.user_sockets_close(user_id=owner.pk)

    message = async_to_sync(layer.receive)(channel)
    assert message == {"type": "session.ended", "code": 4401}
    async_to_sync(layer.group_discard)(services.user_socket_group(owner.pk), channel)


def test_account_delete_removes_user_rows_and_shreds_the_transit_key(
    open_instance: Instance,
) -> None:
    user = _sign_up()
    UserKeys.objects.create(
        user=user,
        wrapped_master_key="AQ==",
        recovery_wrapped_master_key="AQ==",
        master_key_id="a",
        recovery_key_id="b",
        kdf={"name": "PBKDF2"},
    )
    key_name = vault.user_key_name(user.pk)
    vault.encrypt(key_name, [b"x"], context=b"ctx")

    services.account_delete(user=user)

    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert not UserKeys.objects.filter(user_id=user.pk).exists()
    with pytest.raises(vault.VaultError):
        vault.key_latest_version(key_name)


def test_sign_up_refuses_mixed_scripts_and_look_alikes_of_existing_users(
    open_instance: Instance,
) -> None:
    _sign_up("demo", email="")

    with pytest.raises(services.SignupRefusedError, match="mixes Cyrillic and Latin"):
        _sign_up("d\u0435m\u043e", email="")
    _sign_up("pop", email="")
    with pytest.raises(services.SignupRefusedError, match="looks the same as an existing one"):
        _sign_up("\u0440\u043e\u0440", email="")

    assert sorted(get_user_model().objects.values_list("username", flat=True)) == ["demo", "pop"]
