"""Who may sign up (per-instance sign-up policy, invitations) and users' API tokens.

A new account joins exactly one instance at sign-up: the one its invitation names, or
the default instance (``settings.DEFAULT_INSTANCE_SLUG``, else the oldest instance) when
that instance takes open sign-ups. Writes go through ``accounts.services``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


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
        mode = "open" if self.open_signup else "by invitation"
        return f"Sign-up to {self.instance.name}: {mode}"


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
        # Named as the admin lists it: the instance's name, who may use it, its state.
        name = self.instance.name if self.instance_id else "an instance"
        text = f"Invitation to {name} for {self.email or 'anyone'}"
        if self.used_at:
            return f"{text} (used)"
        return f"{text} (until {self.expires_at:%Y-%m-%d})" if self.expires_at else text


class BearerCredential(models.Model):
    """What an API token and an instance API key share: ``<kind>_<prefix>_<secret>``,
    ``prefix`` 12 random hex characters in clear (to find the row and name it in lists),
    only ``digest`` (the hex SHA-256 of the whole credential) stored, and its life
    (expiry, revocation, last use)."""

    prefix = models.CharField(max_length=12, unique=True, editable=False)
    digest = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Updated at most once a minute (``accounts.services.api_token_touch``), not per request.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True
        ordering = ("-created_at",)

    @property
    def status(self) -> str:
        """``revoked``, ``expired`` or ``active`` (now)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"


class ApiToken(BearerCredential):
    """A user's API token for REST (``Authorization: Bearer``) and the chat WebSocket.

    The token is ``om_<prefix>_<secret>``: ``prefix`` is 12 random hex characters, stored
    in clear to find the row and to name the token in lists; ``secret`` is 32 random bytes
    (``secrets.token_urlsafe(32)``). Only ``digest``, the hex SHA-256 of the whole token,
    is stored. A fast unsalted hash is the accepted practice here (unlike for passwords):
    a 256-bit random secret cannot be guessed or looked up in a table, so a slow KDF would
    only cost time on every request. The plaintext is shown once, at creation.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What the token is for.")

    class Meta(BearerCredential.Meta):
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} (om_{self.prefix}_…)"


class InstanceApiKey(BearerCredential):
    """An instance's API key for ``/v1`` (docs/api.md §4): ``omk_<prefix>_<secret>``.

    As for ``ApiToken``: ``prefix`` is 12 random hex characters in clear (to find the row
    and name the key), ``secret`` 32 random bytes, and only ``digest``, the hex SHA-256 of
    the whole key, is stored; the key is shown once. Each key has its own pseudo-user
    (``user``, username ``apikey:<prefix>``, no usable password, no membership), under
    which its conversations and memories are kept, so two keys never share them.
    Revoking keeps that data; deleting the pseudo-user deletes the key with it.
    """

    instance = models.ForeignKey(
        "instances.Instance", on_delete=models.CASCADE, related_name="api_keys"
    )
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="instance_api_key",
        editable=False,
    )
    name = models.CharField(max_length=100, help_text="What the key is for.")

    class Meta(BearerCredential.Meta):
        verbose_name = "instance API key"

    def __str__(self) -> str:
        return f"{self.name} (omk_{self.prefix}_…)"
