"""Who may sign up: per-instance sign-up policy and invitations.

A new account joins exactly one instance at sign-up: the one its invitation names, or
the default instance (``settings.DEFAULT_INSTANCE_SLUG``, else the oldest instance) when
that instance takes open sign-ups. Writes go through ``accounts.services``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SignupPolicy(models.Model):
    """An instance's sign-up setting; an instance without a row takes invitations only."""

    instance = models.OneToOneField(
        "instances.Instance", on_delete=models.CASCADE, related_name="signup_policy"
    )
    open_signup = models.BooleanField(
        default=False,
        help_text="Anyone may create an account and join this instance when it is the "
        "default one; otherwise sign-up needs an invitation.",
    )

    class Meta:
        verbose_name = "sign-up policy"
        verbose_name_plural = "sign-up policies"

    def __str__(self) -> str:
        return f"sign-up for {self.instance_id}: {'open' if self.open_signup else 'invitation'}"


class Invitation(models.Model):
    """A one-use invitation to join an instance; only the token's SHA-256 is stored."""

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="invitations"
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    email = models.EmailField(
        blank=True, help_text="When set, only an account with this address may use it."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"invitation to {self.instance_id} ({self.email or 'anyone'})"
