"""Writes and reads of the channel adapters: identities, conversations, channel states.

docs/channels.md §3. Sync ORM code; adapters call it through ``openmates.db.db_call``.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from chats.services import user_transit_key_ensure
from instances.models import ChannelConfig, Instance
from messaging.models import ChannelConversation, ChannelIdentity, ChannelState

# The pseudo-user's name: a ':' the sign-up form refuses, so no account can take it.
USERNAME_FORMAT = "{kind}:{instance_id}:{platform_user_id}"


def identity_ensure(
    *, instance: Instance, kind: str, platform_user_id: str, display_name: str = ""
) -> ChannelIdentity:
    """The platform user's identity in ``instance``, made with its pseudo-user and transit
    key on first contact (two processes racing both get the one row).

    Raises:
        openmates.vault.VaultError: the pseudo-user's transit key cannot be made (nothing
            is created).
    """
    found = ChannelIdentity.objects.filter(
        instance=instance, kind=kind, platform_user_id=platform_user_id
    ).first()
    if found is not None:
        return found
    username = USERNAME_FORMAT.format(
        kind=kind, instance_id=instance.pk, platform_user_id=platform_user_id
    )[:150]
    try:
        with transaction.atomic():
            user = User(username=username, first_name=display_name[:150])
            user.set_unusable_password()
            user.save()
            identity = ChannelIdentity.objects.create(
                instance=instance,
                kind=kind,
                platform_user_id=platform_user_id,
                user=user,
                display_name=display_name[:150],
            )
            user_transit_key_ensure(user_id=user.pk)
    except IntegrityError:
        return ChannelIdentity.objects.get(
            instance=instance, kind=kind, platform_user_id=platform_user_id
        )
    return identity


def conversation_get(*, identity: ChannelIdentity, chat_key: str) -> str | None:
    """The conversation (chat id) the identity has in ``chat_key``, or None."""
    return (
        ChannelConversation.objects.filter(identity=identity, chat_key=chat_key)
        .values_list("chat_id", flat=True)
        .first()
    )


def conversation_set(*, identity: ChannelIdentity, chat_key: str, chat_id: str) -> None:
    """Remember ``chat_id`` as the identity's conversation in ``chat_key``."""
    ChannelConversation.objects.update_or_create(
        identity=identity, chat_key=chat_key, defaults={"chat_id": chat_id}
    )


def conversation_forget(*, identity: ChannelIdentity, chat_key: str) -> bool:
    """``/new``: the next message in ``chat_key`` starts a new conversation (the old one
    stays the pseudo-user's). Returns whether there was one."""
    deleted, _ = ChannelConversation.objects.filter(identity=identity, chat_key=chat_key).delete()
    return deleted > 0


def state_record(*, config_id: int, status: str, reason: str = "", mode: str | None = None) -> None:
    """Record a channel's status; an error's reason also goes to ``ChannelConfig.last_error``
    (shown in the instance's admin), a successful start clears it."""
    defaults: dict[str, object] = {"status": status, "reason": reason[:2000]}
    if mode is not None:
        defaults["mode"] = mode
    with transaction.atomic():
        if not ChannelConfig.objects.filter(pk=config_id).exists():
            return  # deleted meanwhile
        ChannelState.objects.update_or_create(config_id=config_id, defaults=defaults)
        if status == ChannelState.Status.ERROR:
            ChannelConfig.objects.filter(pk=config_id).update(last_error=reason[:2000])
        elif status == ChannelState.Status.RUNNING:
            ChannelConfig.objects.filter(pk=config_id).update(last_error="")


def update_received(*, config_id: int) -> None:
    """Note that an update came in for the channel now."""
    ChannelState.objects.filter(config_id=config_id).update(last_update_at=timezone.now())
