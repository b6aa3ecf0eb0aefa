"""Instances: an assistant's configuration, its members, prompts, mates, secrets, channels.

Writes go through ``instances.services``; reads through ``instances.selectors``. Secret
values and channel credentials are stored only as envelopes sealed by
``openmates.crypto`` under the instance's named transit key (docs/crypto.md §4).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, RegexValidator
from django.db import models

from instances.languages import default_language_validate
from openmates.api_base import api_base_refusal

TIER_NAMES = ("fast", "standard", "heavy")
_TIER_ENTRY_KEYS = {"model", "api_base", "secret"}
SECRET_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")
secret_name_validator = RegexValidator(
    SECRET_NAME_RE,
    "A secret name starts with a letter and holds letters, digits, '_', '.', '-' (≤ 100).",
)


def _default_embedding_model() -> str:
    return str(settings.LLM_EMBEDDING_MODEL)


def _default_embedding_dimensions() -> int:
    return int(settings.LLM_EMBEDDING_DIMENSIONS)


def _api_base_validate(where: str, api_base: Any) -> None:
    if api_base is None:
        return
    if not isinstance(api_base, str) or not api_base.startswith(("http://", "https://")):
        raise ValidationError(f"{where}: 'api_base' must be an http(s) URL.")
    reason = api_base_refusal(api_base)
    if reason:
        raise ValidationError(f"{where}: 'api_base' is refused: {reason}.")


def tier_map_validate(value: Any) -> None:
    """Check a tier map's shape: ``{tier: [{"model", "api_base"?, "secret"?}, ...]}``.

    An empty mapping means "use settings.LLM_DEFAULT_TIERS". Tiers are ``fast``,
    ``standard`` and ``heavy``; each list is the ordered fallback chain, non-empty; ``model``
    is LiteLLM's ``provider/name`` form; ``api_base`` an http(s) URL that
    :func:`openmates.api_base.api_base_refusal` allows (its host name is resolved: no
    link-local or metadata address); ``secret`` names an instance secret.

    Raises:
        ValidationError: naming the first offending tier or entry.
    """
    if not isinstance(value, dict):
        raise ValidationError("The tier map must be an object of tier → list of models.")
    for tier, chain in value.items():
        if tier not in TIER_NAMES:
            raise ValidationError(f"Unknown tier {tier!r} (use {', '.join(TIER_NAMES)}).")
        if not isinstance(chain, list) or not chain:
            raise ValidationError(f"Tier {tier!r} needs a non-empty list of models.")
        for position, entry in enumerate(chain, start=1):
            where = f"{tier} #{position}"
            if not isinstance(entry, dict):
                raise ValidationError(f"{where}: each entry is an object with a 'model'.")
            extra = set(entry) - _TIER_ENTRY_KEYS
            if extra:
                raise ValidationError(f"{where}: unknown keys {sorted(extra)}.")
            model = entry.get("model")
            if not isinstance(model, str) or "/" not in model.strip("/"):
                raise ValidationError(f"{where}: 'model' must look like 'provider/name'.")
            _api_base_validate(where, entry.get("api_base"))
            secret = entry.get("secret")
            if secret is not None and (
                not isinstance(secret, str) or not SECRET_NAME_RE.match(secret)
            ):
                raise ValidationError(f"{where}: 'secret' must name an instance secret.")


class Instance(models.Model):
    """One configured assistant (docs/architecture.md §3)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    default_language = models.CharField(max_length=16, default="en")
    tier_map = models.JSONField(
        default=dict,
        blank=True,
        validators=[tier_map_validate],
        help_text='Per tier an ordered fallback list, e.g. {"standard": [{"model": '
        '"openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}]}. Empty: the server defaults.',
    )
    embedding_model = models.CharField(max_length=200, default=_default_embedding_model)
    embedding_dimensions = models.PositiveIntegerField(default=_default_embedding_dimensions)
    memory_enabled = models.BooleanField(default=True)
    follow_ups_enabled = models.BooleanField(default=True)
    model_preprocessing_enabled = models.BooleanField(
        default=True, help_text="Run model-based pre-processing (safety, titles) on first messages."
    )
    # Tool preselection (docs/architecture.md §6); 5 is pre-processing's most tools offered.
    tools_offer_all_up_to = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(5)],
        help_text="Offer every enabled tool when the instance has at most this many (0-5; "
        "0: never), the main model deciding which to call.",
    )
    model_tool_preselection = models.BooleanField(
        default=False,
        help_text="With model pre-processing on: the fast tier also picks tools for first "
        "messages, added to the local picks (falls back to them on error or after 3 s).",
    )
    # Limits of /v1 per API key and per user (docs/api.md §5); empty: the server's defaults
    # (settings.V1_REQUESTS_PER_MINUTE, settings.V1_TOKENS_PER_DAY).
    api_requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="/v1 requests per minute per key or user (empty: default)."
    )
    api_tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="/v1 tokens per UTC day per key or user (empty: default)."
    )
    # The transit key version this database last rotated to (``instance_keys_rotate``).
    key_version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    def clean(self) -> None:
        """Model validation beyond the fields': ``default_language`` must be a code of a
        language the assistant answers in (``instances.languages``), so the language
        fallback of pre-processing never yields one it does not offer."""
        super().clean()
        try:
            default_language_validate(self.default_language)
        except ValidationError as exc:
            raise ValidationError({"default_language": exc.messages}) from exc


class InstanceMember(models.Model):
    """A user's membership of an instance; owners and admins administer it."""

    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"

    ADMIN_ROLES = (Role.OWNER, Role.ADMIN)
    # The tiers a role may ask for (message.send ``overrides.tier``, docs/protocol.md §3):
    # members may lower the tier, only owners and admins may ask for ``heavy``. The chat
    # page offers only these; pre-processing enforces them (``pipeline.preprocess`` reads
    # this table).
    TIERS_BY_ROLE: ClassVar[dict[str, tuple[str, ...]]] = {
        Role.OWNER: ("fast", "standard", "heavy"),
        Role.ADMIN: ("fast", "standard", "heavy"),
        Role.MEMBER: ("fast", "standard"),
    }

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="instance_memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("instance", "user"), name="instance_member_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.role} of {self.instance.slug}"

    @property
    def allowed_tiers(self) -> tuple[str, ...]:
        """The tiers this member may ask for, cheapest first (an unknown role: a member's)."""
        return self.TIERS_BY_ROLE.get(self.role, self.TIERS_BY_ROLE[self.Role.MEMBER])


class PromptSection(models.Model):
    """One of the eight system-prompt sections of an instance."""

    class Key(models.TextChoices):
        IDENTITY = "identity", "Identity"
        PERSONA = "persona", "Persona"
        TOOLING = "tooling", "Tooling"
        SAFETY = "safety", "Safety"
        SKILLS = "skills", "Skills"
        MEMORY = "memory", "Memory"
        USER = "user", "User"
        DATETIME = "datetime", "Date and time"

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="prompt_sections")
    key = models.CharField(max_length=16, choices=Key.choices)
    content = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("instance", "key"), name="prompt_section_unique")
        ]

    def __str__(self) -> str:
        return f"{self.instance.slug}: {self.key}"


class Mate(models.Model):
    """A persona the pipeline can pick for a message (category, name, system prompt)."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="mates")
    category = models.SlugField(max_length=64, default="general")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    system_prompt = models.TextField(blank=True)
    is_default = models.BooleanField(default=False)

    class Meta:
        ordering = ("instance", "category", "name")
        constraints = [
            models.UniqueConstraint(fields=("instance", "name"), name="mate_name_unique"),
            models.UniqueConstraint(
                fields=("instance",),
                condition=models.Q(is_default=True),
                name="mate_one_default",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.category})"


class InstanceSecret(models.Model):
    """A named secret (an API key …): a sealed envelope, never the plaintext.

    ``sealed`` is ``openmates.crypto.seal`` output with purpose ``secret``, owner the
    instance id and object id the secret's name; ``key_version`` is the transit key
    version its data key was last wrapped with (``rotate_keys`` rewraps older ones).
    """

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=100, validators=[secret_name_validator])
    sealed = models.BinaryField()
    key_version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("instance", "name")
        constraints = [
            models.UniqueConstraint(fields=("instance", "name"), name="instance_secret_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} (set on {self.updated_at:%Y-%m-%d})" if self.updated_at else self.name


class ChannelConfig(models.Model):
    """A chat channel (Telegram, Slack) of an instance with sealed credentials."""

    class Kind(models.TextChoices):
        TELEGRAM = "telegram", "Telegram"
        SLACK = "slack", "Slack"

    # Credential fields each kind needs (all strings); checked by the services.
    REQUIRED_CREDENTIALS: dict[str, tuple[str, ...]] = {
        Kind.TELEGRAM: ("bot_token",),
        Kind.SLACK: ("bot_token", "signing_secret"),
    }

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="channels")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    credentials_sealed = models.BinaryField(null=True, blank=True, editable=False)
    credentials_set_at = models.DateTimeField(null=True, blank=True, editable=False)
    key_version = models.PositiveIntegerField(default=1)
    enabled = models.BooleanField(default=False)
    last_error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("instance", "kind")
        constraints = [
            models.UniqueConstraint(fields=("instance", "kind"), name="channel_config_unique")
        ]

    def __str__(self) -> str:
        return f"{self.instance.slug}: {self.kind}"
