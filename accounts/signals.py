"""Sockets of a user whose sign-in stops being valid are closed with 4401 (PROTOCOL.md).

The account pages close them explicitly (sign-out, own password change, deletion). These
receivers cover the changes made elsewhere — the admin's password reset or
deactivation, ``manage.py changepassword``, a shell — which would otherwise leave an open
socket working while REST already refuses the user. A receiver is the only hook those
paths share; it only publishes an event after commit, it writes nothing.
"""

from __future__ import annotations

from typing import Any

from accounts.services import user_sockets_close


def user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """``post_save`` of the user model: a new password or deactivation ends the sockets."""
    if created:
        return
    # AbstractBaseUser keeps the new raw password in ``_password`` until save() returns.
    if not instance.is_active or getattr(instance, "_password", None) is not None:
        user_sockets_close(user_id=instance.pk)


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_delete`` of the user model: the sockets end with the account."""
    user_sockets_close(user_id=instance.pk)
