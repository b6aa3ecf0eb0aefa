"""Account writes: sign-up (open or by invitation), invitations, sign-out, deletion, API
tokens.

Every action that ends a session also closes its WebSockets with code 4401
(docs/protocol.md §9) by publishing ``{"type": "session.ended", "code": 4401}`` to a
channel-layer group: ``user_socket_group(user_id)``, which every ``/ws/chat/`` socket of
the user joins (a password change, deactivation, account deletion), or
``session_socket_group(session_key)``, which a socket opened with a browser session
joins (signing out ends that session only). A socket opened with an API token joins
``api_token_socket_group(token_id)``, so revoking the token closes it the same way.

A user creates at most ``API_TOKEN_CREATE_PER_HOUR`` tokens an hour and holds at most
``API_TOKEN_ACTIVE_MAX`` active ones; a password change revokes them all.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
from datetime import datetime, timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import logout
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from accounts.deletion import account_data_owners
from accounts.models import ApiToken, Invitation
from accounts.selectors import (
    api_token_creations_since,
    api_token_digest,
    api_token_get_usable,
    api_tokens_active_count,
    invitation_token_hash,
    signup_target_get,
)
from accounts.usernames import username_validate
from instances.models import Instance, InstanceMember
from instances.services import instance_member_set
from openmates import crypto, sockets, vault

logger = logging.getLogger(__name__)

SESSION_ENDED_CLOSE_CODE = 4401
INVITATION_VALID_DAYS = 14
# ``last_used_at`` is written at most this often per token, not on every request.
API_TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)
API_TOKEN_NAME_MAX = 100
# Per user: tokens created in any sliding hour (revoked ones count), and tokens active at
# once. A stolen session (or a script gone wrong) cannot mint tokens by the hundred.
API_TOKEN_CREATE_PER_HOUR = 10
API_TOKEN_CREATE_WINDOW = timedelta(hours=1)
API_TOKEN_ACTIVE_MAX = 25


class SignupRefusedError(Exception):
    """Sign-up is closed, or the invitation is unknown, used, expired or for another address."""


class ApiTokenInvalidError(ValueError):
    """An API token cannot be created as asked (empty or overlong name, expiry not ahead)."""


class ApiTokenLimitError(Exception):
    """The user may not create another API token now.

    ``retry_after`` is the number of seconds until the hourly limit lets one more through,
    or None when the user holds ``API_TOKEN_ACTIVE_MAX`` active tokens (revoke one first).
    """

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def user_socket_group(user_id: int | str) -> str:
    """The channel-layer group all of a user's chat sockets join (``openmates.sockets``)."""
    return sockets.user_socket_group(user_id)


def api_token_socket_group(token_id: int | str) -> str:
    """The channel-layer group of the sockets opened with one API token."""
    return f"api-token.{token_id}.sockets"


def session_socket_group(session_key: str) -> str:
    """The channel-layer group of the sockets opened with one browser session (named by
    a hash of its key: the key itself is a credential)."""
    digest = hashlib.sha256(session_key.encode()).hexdigest()[:32]
    return f"session.{digest}.sockets"


def _sockets_close(group: str) -> None:
    # After commit: a socket must not close for a change that was rolled back.
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "session.ended", "code": SESSION_ENDED_CLOSE_CODE}
    transaction.on_commit(lambda: async_to_sync(layer.group_send)(group, message))


def user_sockets_close(*, user_id: int | str) -> None:
    """Close every socket of the user with 4401, once the surrounding transaction commits."""
    _sockets_close(user_socket_group(user_id))


def user_transit_key_ensure(*, user_id: int | str) -> None:
    """Create the user's named transit key ``user-<id>`` (idempotent; admin token).

    Raises:
        openmates.vault.VaultError: Vault refused or is unreachable.
    """
    vault.ensure_key(vault.user_key_name(user_id))


def invitation_create(
    *,
    instance: Instance,
    created_by: User | None,
    email: str = "",
    valid_days: int = INVITATION_VALID_DAYS,
) -> tuple[Invitation, str]:
    """Create a one-use invitation; returns it and its token (shown once, stored hashed).

    ``email``, when given, must be an e-mail address (compared lower case at sign-up).

    Raises:
        ValidationError: ``email`` is not an e-mail address (an invitation for it could
            never be used).
    """
    if email.strip():
        validate_email(email.strip())
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
        SignupRefusedError: sign-up is by invitation and the token is missing or not usable,
            the invitation is bound to another e-mail address, or the username mixes
            scripts or reads like an existing one (``accounts.usernames``).
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
        if invitation.email and not email.strip():
            raise SignupRefusedError(
                "This invitation was made for an e-mail address: enter it to sign up."
            )
        if invitation.email and invitation.email != email.strip().lower():
            raise SignupRefusedError("This invitation is for another e-mail address.")
    try:
        username_validate(username)
    except ValidationError as refused:
        raise SignupRefusedError(refused.messages[0]) from refused
    user = User.objects.create_user(username=username, email=email, password=password)
    instance_member_set(instance=target.instance, user=user, role=InstanceMember.Role.MEMBER)
    # The user's named transit key must exist before anything of theirs is sealed; a
    # VaultError here rolls the sign-up back (``ensure_key`` is idempotent on retry).
    user_transit_key_ensure(user_id=user.pk)
    if invitation is not None:
        invitation.used_by = user
        invitation.used_at = timezone.now()
        invitation.save(update_fields=["used_by", "used_at"])
    return user


def user_sign_out(*, request: HttpRequest) -> None:
    """End the request's session and close the sockets opened with it (4401). The user's
    other sessions (another browser or device) and their sockets go on: signing out here
    is not signing out everywhere."""
    session_key = request.session.session_key
    logout(request)
    if session_key:
        _sockets_close(session_socket_group(session_key))


def account_delete(*, user: User) -> None:
    """Delete an account so nothing of it decrypts any more (crypto-shred first).

    The one place an account is deleted (the account page, ``DELETE /api/account/`` and
    the admin call it). Order: the user's transit key ``user-<id>`` (every server-side
    envelope of theirs becomes unreadable at once) and the in-process data keys under it;
    then, in one transaction, each app's part (``accounts.deletion``: ``chats`` drops the
    user's cache entries and locks their chats) and the user row with everything that
    cascades from it. The user's sockets close with 4401 once that commits (the user
    model's ``post_delete`` receiver, ``accounts.signals.user_deleted``).

    Raises:
        openmates.vault.VaultError: Vault could not delete the key; nothing was deleted.
    """
    user_id = user.pk
    key_name = vault.user_key_name(user_id)
    vault.delete_key(key_name)
    crypto.forget_key(key_name)
    with transaction.atomic():
        for owner in account_data_owners():
            owner.account_data_delete(user_id=user_id)
        user.delete()
    logger.info("account %s deleted", user_id)


def _api_token_limits_check(*, user: User) -> None:
    now = timezone.now()
    recent = api_token_creations_since(user=user, since=now - API_TOKEN_CREATE_WINDOW)
    if len(recent) >= API_TOKEN_CREATE_PER_HOUR:
        # One more fits once the oldest creation still filling the hour has left it.
        frees_at = recent[len(recent) - API_TOKEN_CREATE_PER_HOUR] + API_TOKEN_CREATE_WINDOW
        seconds = max(1, math.ceil((frees_at - now).total_seconds()))
        minutes = math.ceil(seconds / 60)
        raise ApiTokenLimitError(
            f"You created {API_TOKEN_CREATE_PER_HOUR} API tokens in the last hour, the most "
            f"allowed; try again in {minutes} minute{'s' if minutes != 1 else ''}.",
            retry_after=seconds,
        )
    if api_tokens_active_count(user=user) >= API_TOKEN_ACTIVE_MAX:
        raise ApiTokenLimitError(
            f"You have {API_TOKEN_ACTIVE_MAX} active API tokens, the most allowed; "
            "revoke one first."
        )


def api_token_create(
    *, user: User, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create an API token for ``user``; returns the row and the token ``om_<prefix>_<secret>``.

    The token is returned once and stored only as its digest; callers show it to the user
    and never log it. ``expires_at`` (aware) None means the token does not expire.

    Raises:
        ApiTokenInvalidError: ``name`` is empty or longer than 100 characters, or
            ``expires_at`` is not in the future.
        ApiTokenLimitError: the user created ``API_TOKEN_CREATE_PER_HOUR`` tokens in the
            last hour or holds ``API_TOKEN_ACTIVE_MAX`` active ones.
    """
    name = name.strip()
    if not name or len(name) > API_TOKEN_NAME_MAX:
        raise ApiTokenInvalidError(f"A token name is 1 to {API_TOKEN_NAME_MAX} characters.")
    if expires_at is not None and expires_at <= timezone.now():
        raise ApiTokenInvalidError("A token's expiry must be in the future.")
    # 48 random bits of prefix: a clash is an IntegrityError on the unique index, not a
    # token that authenticates as someone else.
    prefix = secrets.token_hex(6)
    raw = f"om_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        # The user's row lock puts concurrent creations in line, so each one counts the
        # tokens the others made (parallel requests otherwise all pass the limit).
        User.objects.select_for_update().only("pk").get(pk=user.pk)
        _api_token_limits_check(user=user)
        token = ApiToken.objects.create(
            user=user, name=name, prefix=prefix, digest=api_token_digest(raw), expires_at=expires_at
        )
    return token, raw


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke ``token`` (idempotent; the first revocation time is kept) and close its sockets.

    Its open WebSockets close with 4401 once the surrounding transaction commits.
    """
    with transaction.atomic():
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token.refresh_from_db(fields=["revoked_at"])
        _sockets_close(api_token_socket_group(token.pk))
    return token


def api_tokens_revoke_all(*, user_id: int) -> int:
    """Revoke every unrevoked token of the user; returns how many.

    Each token's open WebSockets close with 4401 once the surrounding transaction commits.
    """
    with transaction.atomic():
        token_ids = list(
            ApiToken.objects.select_for_update()
            .filter(user_id=user_id, revoked_at__isnull=True)
            .values_list("pk", flat=True)
        )
        ApiToken.objects.filter(pk__in=token_ids).update(revoked_at=timezone.now())
        for token_id in token_ids:
            _sockets_close(api_token_socket_group(token_id))
    return len(token_ids)


def user_password_changed(*, user_id: int) -> None:
    """End what the old password let in: revoke all of the user's API tokens and close
    every socket of the user with 4401 (after commit).

    A user who changes the password after a leak expects every credential made with the
    old one to stop working, not only the browser sessions.
    """
    api_tokens_revoke_all(user_id=user_id)
    user_sockets_close(user_id=user_id)


def _touch_due(token: ApiToken, now: datetime) -> bool:
    return token.last_used_at is None or now - token.last_used_at >= API_TOKEN_TOUCH_INTERVAL


def _stale_rows(token: ApiToken, now: datetime) -> QuerySet[ApiToken]:
    # Conditional, so concurrent requests write the row at most once per interval.
    return ApiToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - API_TOKEN_TOUCH_INTERVAL),
        pk=token.pk,
    )


def api_token_touch(*, token: ApiToken) -> bool:
    """Record a use of ``token`` unless one was recorded within the last minute.

    Returns whether ``last_used_at`` was written (and set on ``token``).
    """
    now = timezone.now()
    if not _touch_due(token, now) or not _stale_rows(token, now).update(last_used_at=now):
        return False
    token.last_used_at = now
    return True


def api_token_authenticate(raw: str) -> ApiToken | None:
    """The usable token ``raw`` names, its ``user`` loaded and its use recorded, else None.

    None for a malformed, unknown, revoked or expired token or an inactive user (see
    ``accounts.selectors.api_token_get_usable``). One sync call for the read and the
    write, so async callers cross into a thread once.
    """
    token = api_token_get_usable(raw)
    if token is not None:
        api_token_touch(token=token)
    return token
