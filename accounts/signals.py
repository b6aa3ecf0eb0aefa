"""A sign-in that stops being valid ends what it let in (docs/protocol.md §9: sockets close 4401).

Sign-out closes sockets explicitly. These receivers cover every path that sets a password,
deactivates or deletes a user — the account pages, the admin's password reset or
deactivation, ``manage.py changepassword``, a shell — since a receiver is the only hook
those paths share on Django's own user model. A new password revokes the user's API
tokens (``accounts.services.user_password_changed``) in the same transaction as the save;
the socket events go out after commit.
"""

from __future__ import annotations

from typing import Any

from accounts.services import user_password_changed, user_sockets_close


def user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """``post_save`` of the user model: a new password revokes the user's API tokens and
    ends the sockets; a deactivation ends the sockets."""
    if created:
        return
    # AbstractBaseUser keeps the new raw password in ``_password`` until save() returns;
    # a hash upgrade at sign-in clears it first, so it does not count as a change.
    if getattr(instance, "_password", None) is not None:
        user_password_changed(user_id=instance.pk)
    elif not instance.is_active:
        user_sockets_close(user_id=instance.pk)


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_delete`` of the user model: the sockets end with the account."""
    user_sockets_close(user_id=instance.pk)
