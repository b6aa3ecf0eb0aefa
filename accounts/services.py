"""Account writes: sign-up (open or by invitation), invitations, sign-out, deletion.

Every action that ends a session also closes the user's WebSockets with code 4401
(PROTOCOL.md): ``user_sockets_close`` publishes ``{"type": "session.ended", "code": 4401}``
to the channel-layer group ``user_socket_group(user_id)``, which every ``/ws/chat/``
socket of the user joins.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import logout
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from accounts.models import Invitation
from accounts.selectors import invitation_token_hash, signup_target_get
from chats import services as chat_services
from instances.models import Instance, InstanceMember
from instances.services import instance_member_set

SESSION_ENDED_CLOSE_CODE = 4401
INVITATION_VALID_DAYS = 14


class SignupRefusedError(Exception):
    """Sign-up is closed, or the invitation is unknown, used, expired or for another address."""


def user_socket_group(user_id: int | str) -> str:
    """The channel-layer group all of a user's chat sockets join."""
    return f"user.{user_id}.sockets"


def user_sockets_close(*, user_id: int | str) -> None:
    """Close every socket of the user with 4401, once the surrounding transaction commits."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "session.ended", "code": SESSION_ENDED_CLOSE_CODE}
    group = user_socket_group(user_id)
    transaction.on_commit(lambda: async_to_sync(layer.group_send)(group, message))


def invitation_create(
    *,
    instance: Instance,
    created_by: User | None,
    email: str = "",
    valid_days: int = INVITATION_VALID_DAYS,
) -> tuple[Invitation, str]:
    """Create a one-use invitation; returns it and its token (shown once, stored hashed)."""
    token = secrets.token_urlsafe(24)
    invitation = Invitation.objects.create(
        instance=instance,
        token_hash=invitation_token_hash(token),
        email=email.strip().lower(),
        created_by=created_by,
        expires_at=timezone.now() + timedelta(days=valid_days),
    )
    return invitation, token


@transaction.atomic
def user_sign_up(*, username: str, email: str, password: str, invitation_token: str = "") -> User:
    """Create an account that joins the invited instance, or the default one when open.

    ``password`` is expected to have passed Django's password validators already.

    Raises:
        openmates.vault.VaultError: the user's transit key could not be created.
        SignupRefusedError: sign-up is by invitation and the token is missing or not usable, or
            the invitation is bound to another e-mail address.
    """
    target = signup_target_get(invitation_token=invitation_token)
    if target.instance is None:
        raise SignupRefusedError("This server takes new accounts by invitation only.")
    invitation = target.invitation
    if invitation is not None:
        # Lock the row: two sign-ups racing for one invitation, only one wins.
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.used_at is not None:
            raise SignupRefusedError("This invitation has already been used.")
        if invitation.email and invitation.email != email.strip().lower():
            raise SignupRefusedError("This invitation is for another e-mail address.")
    user = User.objects.create_user(username=username, email=email, password=password)
    instance_member_set(instance=target.instance, user=user, role=InstanceMember.Role.MEMBER)
    # The user's named transit key must exist before anything of theirs is sealed; a
    # VaultError here rolls the sign-up back (``ensure_key`` is idempotent on retry).
    chat_services.user_transit_key_ensure(user_id=user.pk)
    if invitation is not None:
        invitation.used_by = user
        invitation.used_at = timezone.now()
        invitation.save(update_fields=["used_by", "used_at"])
    return user


def user_sign_out(*, request: HttpRequest) -> None:
    """End the request's session and close the user's sockets."""
    user_id = request.user.pk
    logout(request)
    if user_id is not None:
        user_sockets_close(user_id=user_id)


def account_delete(*, user: User) -> None:
    """Delete the account and everything it owns; its sockets close with 4401.

    ``chats.services.account_delete`` shreds the user's transit key first, then removes
    cache entries and rows (see there).

    Raises:
        openmates.vault.VaultError: Vault could not delete the key; nothing was deleted.
    """
    user_id = user.pk
    with transaction.atomic():
        chat_services.account_delete(user=user)
        user_sockets_close(user_id=user_id)
