"""Writes for instances: creation with defaults, prompt sections, secrets, channels, keys.

Secrets and channel credentials are sealed with ``openmates.crypto`` under the
instance's transit key ``instance-<id>`` (docs/crypto.md §4): purpose ``secret``, owner the
instance id, object id the secret's name (``channel:<kind>`` for channel credentials).
The plaintext never reaches the database, a log line or a return value other than the
``*_get`` readers'.

Services that change what other apps derive from an instance (its secrets, skills)
call every registered ``InstanceExtension`` explicitly (see ``instances.extensions``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from instances.defaults import DEFAULT_MATE, DEFAULT_PROMPT_SECTIONS
from instances.extensions import extensions, instance_data_owners
from instances.models import (
    SECRET_NAME_RE,
    ChannelConfig,
    Instance,
    InstanceMember,
    InstanceSecret,
    Mate,
    PromptSection,
)
from instances.selectors import prompt_cache_drop, prompt_sections_get, tier_secret_names
from openmates import crypto, vault
from openmates.db import db_call

SECRET_PURPOSE = "secret"  # noqa: S105 (the crypto purpose's name)

__all__ = [
    "ainstance_secret_get",
    "ainstance_secrets_get",
    "ainstance_tier_secrets_get",
    "channel_config_set",
    "channel_credentials_get",
    "channel_error_record",
    "instance_config_saved",
    "instance_create",
    "instance_delete",
    "instance_keys_rotate",
    "instance_member_set",
    "instance_secret_delete",
    "instance_secret_get",
    "instance_secret_set",
    "instance_secrets_get",
    "instance_tier_secrets_get",
    "prompt_cache_invalidate",
    "prompt_section_update",
    "prompt_sections_get",
]


def _key_name(instance: Instance | int) -> str:
    return vault.instance_key_name(instance if isinstance(instance, int) else instance.pk)


def _notify_config_changed(instance: Instance) -> None:
    for extension in extensions():
        extension.instance_config_changed(instance)


@transaction.atomic
def instance_create(
    *, slug: str, name: str, owner: Any, default_language: str = "en", **fields: Any
) -> Instance:
    """Create an instance with its owner, eight prompt sections, the default mate and skills.

    Also creates the instance's transit key in Vault (admin token), inside the
    transaction: if Vault refuses, nothing is created. ``fields`` may set any other
    ``Instance`` field (``tier_map``, switches, embedding model …).

    Raises:
        ValidationError: bad slug, duplicate slug, invalid tier map.
        openmates.vault.VaultError: the transit key cannot be created.
    """
    instance = Instance(slug=slug, name=name, default_language=default_language, **fields)
    instance.full_clean()
    instance.save()
    InstanceMember.objects.create(instance=instance, user=owner, role=InstanceMember.Role.OWNER)
    PromptSection.objects.bulk_create(
        PromptSection(
            instance=instance,
            key=key,
            content=DEFAULT_PROMPT_SECTIONS[key].format(instance_name=name),
        )
        for key in PromptSection.Key.values
    )
    Mate.objects.create(instance=instance, is_default=True, **DEFAULT_MATE)
    for extension in extensions():
        extension.instance_created(instance)
    key_name = _key_name(instance)
    vault.ensure_key(key_name)
    instance.key_version = vault.key_latest_version(key_name)
    instance.save(update_fields=["key_version"])
    return instance


def instance_delete(*, instance: Instance) -> None:
    """Delete an instance with everything it owns, then crypto-shred its transit key and
    the keys of the registered data owners (``instances.extensions.InstanceDataOwner``:
    the memory keys of its users).

    The keys are deleted after the rows commit, so a rolled-back delete never loses one;
    anything sealed under them (copies in backups included) becomes unreadable.

    Raises:
        openmates.vault.VaultError: from a key deletion (the rows are already gone; run
            ``vault.delete_key`` again for ``instance-<id>``, and ``memory-<id>-…``).
    """
    key_name = _key_name(instance)

    def shred() -> None:
        vault.delete_key(key_name)
        crypto.forget_key(key_name)

    with transaction.atomic():
        after = [owner.instance_data_delete(instance) for owner in instance_data_owners()]
        instance.delete()
        transaction.on_commit(shred)
        for callback in after:
            if callback is not None:
                transaction.on_commit(callback)


def instance_member_set(*, instance: Instance, user: Any, role: str) -> InstanceMember:
    """Add ``user`` to ``instance`` with ``role`` or change their role.

    Raises:
        ValidationError: unknown role.
    """
    if role not in InstanceMember.Role.values:
        raise ValidationError(f"unknown role {role!r}")
    member, _ = InstanceMember.objects.update_or_create(
        instance=instance, user=user, defaults={"role": role}
    )
    return member


def prompt_cache_invalidate(instance_id: int) -> None:
    """Drop the cached prompt sections of an instance once the current transaction commits."""
    transaction.on_commit(lambda: prompt_cache_drop(instance_id))


def prompt_section_update(*, instance: Instance, key: str, content: str) -> PromptSection:
    """Set one prompt section's text; the cached sections are dropped on commit.

    Raises:
        ValidationError: ``key`` is not one of the eight section keys.
    """
    if key not in PromptSection.Key.values:
        raise ValidationError(f"unknown prompt section {key!r}")
    with transaction.atomic():
        section, _ = PromptSection.objects.update_or_create(
            instance=instance, key=key, defaults={"content": content}
        )
        prompt_cache_invalidate(instance.pk)
    return section


def instance_config_saved(*, instance: Instance) -> None:
    """Tell caches and extensions that an instance's configuration was edited as a whole.

    The admin calls it after saving an instance with its inline rows: the prompt cache is
    dropped on commit and every extension recomputes what it derives (tools).
    """
    prompt_cache_invalidate(instance.pk)
    _notify_config_changed(instance)


# --- Secrets -----------------------------------------------------------------------------


def _seal(instance: Instance, object_id: str, plaintext: bytes) -> bytes:
    return crypto.seal(
        key_name=_key_name(instance),
        purpose=SECRET_PURPOSE,
        owner_id=instance.pk,
        object_id=object_id,
        plaintext=plaintext,
    )


def _open(instance_id: int, object_id: str, sealed: bytes) -> bytes:
    return crypto.open_sealed(
        key_name=_key_name(instance_id),
        purpose=SECRET_PURPOSE,
        owner_id=instance_id,
        object_id=object_id,
        sealed=sealed,
    )


def instance_secret_set(*, instance: Instance, name: str, value: str) -> InstanceSecret:
    """Seal ``value`` and store it as secret ``name`` (replacing any earlier value).

    The instance's tools are recomputed (a tool needing this secret may turn on).

    Raises:
        ValidationError: bad name or empty value.
        openmates.vault.VaultError: Vault is unreachable while a data key is created.
    """
    if not SECRET_NAME_RE.match(name):
        raise ValidationError(f"bad secret name {name!r}")
    if not value:
        raise ValidationError("a secret value cannot be empty")
    sealed = _seal(instance, name, value.encode("utf-8"))
    with transaction.atomic():
        secret, _ = InstanceSecret.objects.update_or_create(
            instance=instance,
            name=name,
            defaults={"sealed": sealed, "key_version": crypto.sealed_key_version(sealed)},
        )
        _notify_config_changed(instance)
    return secret


def instance_secret_delete(*, instance: Instance, name: str) -> bool:
    """Delete secret ``name``; returns whether it existed. Tools are recomputed."""
    with transaction.atomic():
        deleted, _ = InstanceSecret.objects.filter(instance=instance, name=name).delete()
        _notify_config_changed(instance)
    return deleted > 0


def instance_secret_get(*, instance: Instance, name: str) -> str | None:
    """The plaintext of secret ``name``, or ``None`` when it is not set.

    Raises:
        openmates.crypto.DecryptionError: the sealed value cannot be opened (the instance's
            transit key was deleted or replaced, or the row was tampered with).
        openmates.vault.VaultError: Vault is unreachable and the data key is not warm.
    """
    sealed = (
        InstanceSecret.objects.filter(instance_id=instance.pk, name=name)
        .values_list("sealed", flat=True)
        .first()
    )
    if sealed is None:
        return None
    return _open(instance.pk, name, bytes(sealed)).decode("utf-8")


def instance_secrets_get(*, instance: Instance, names: list[str] | set[str]) -> dict[str, str]:
    """Plaintexts of the named secrets that are set, ``{name: value}`` (unset ones absent).

    Raises: as ``instance_secret_get``.
    """
    rows = InstanceSecret.objects.filter(instance_id=instance.pk, name__in=list(names))
    return {
        name: _open(instance.pk, name, bytes(sealed)).decode("utf-8")
        for name, sealed in rows.values_list("name", "sealed")
    }


async def ainstance_secret_get(*, instance: Instance, name: str) -> str | None:
    """Async twin of ``instance_secret_get`` (ORM and Vault off the event loop; the
    connection is released at once, so concurrent turns do not each hold one)."""
    return await db_call(instance_secret_get, instance=instance, name=name)


async def ainstance_secrets_get(
    *, instance: Instance, names: list[str] | set[str]
) -> dict[str, str]:
    """Async twin of ``instance_secrets_get`` (connection released at once)."""
    return await db_call(instance_secrets_get, instance=instance, names=names)


def instance_tier_secrets_get(*, instance: Instance) -> dict[str, str]:
    """The set secrets among those the instance's tier map names, ``{name: value}``.

    What ``openmates.llm``'s calls for this instance take as ``secrets=`` (the gateway
    imports no app, so its callers resolve the keys).

    Raises: as ``instance_secret_get``.
    """
    names = tier_secret_names(instance)
    return instance_secrets_get(instance=instance, names=names) if names else {}


async def ainstance_tier_secrets_get(*, instance: Instance) -> dict[str, str]:
    """Async twin of ``instance_tier_secrets_get``: one thread hop, none when the tier map
    names no secret (the bundled model, the settings' defaults)."""
    names = tier_secret_names(instance)
    if not names:
        return {}
    return await db_call(instance_secrets_get, instance=instance, names=names)


# --- Channels ----------------------------------------------------------------------------


def _channel_object_id(kind: str) -> str:
    return f"channel:{kind}"


def channel_config_set(
    *,
    instance: Instance,
    kind: str,
    credentials: dict[str, str] | None = None,
    enabled: bool | None = None,
) -> ChannelConfig:
    """Create or update the ``kind`` channel; ``credentials`` (when given) are sealed.

    ``credentials`` must hold every field the kind needs (``ChannelConfig.
    REQUIRED_CREDENTIALS``), all non-empty strings. Enabling a channel without
    credentials is refused.

    Raises:
        ValidationError: unknown kind, missing or non-string credential fields.
    """
    if kind not in ChannelConfig.Kind.values:
        raise ValidationError(f"unknown channel kind {kind!r}")
    sealed: bytes | None = None
    if credentials is not None:
        missing = [
            field
            for field in ChannelConfig.REQUIRED_CREDENTIALS[kind]
            if not isinstance(credentials.get(field), str) or not credentials[field]
        ]
        if missing or not all(isinstance(v, str) for v in credentials.values()):
            raise ValidationError(
                f"{kind} credentials need non-empty strings for: "
                + ", ".join(ChannelConfig.REQUIRED_CREDENTIALS[kind])
            )
        plaintext = json.dumps(credentials, sort_keys=True).encode("utf-8")
        sealed = _seal(instance, _channel_object_id(kind), plaintext)
    with transaction.atomic():
        channel, _ = ChannelConfig.objects.select_for_update().get_or_create(
            instance=instance, kind=kind
        )
        if sealed is not None:
            channel.credentials_sealed = sealed
            channel.credentials_set_at = timezone.now()
            channel.key_version = crypto.sealed_key_version(sealed)
            channel.last_error = ""
        if enabled is not None:
            channel.enabled = enabled
        if channel.enabled and channel.credentials_sealed is None:
            raise ValidationError(f"the {kind} channel needs credentials before it is enabled")
        channel.save()
    return channel


def channel_credentials_get(*, channel: ChannelConfig) -> dict[str, str] | None:
    """The channel's credentials, or ``None`` when none are set.

    Raises: as ``instance_secret_get``.
    """
    if channel.credentials_sealed is None:
        return None
    plaintext = _open(
        channel.instance_id, _channel_object_id(channel.kind), bytes(channel.credentials_sealed)
    )
    loaded = json.loads(plaintext)
    return {str(k): str(v) for k, v in loaded.items()}


def channel_error_record(*, channel: ChannelConfig, error: str) -> None:
    """Remember the channel's last error (shown in the admin); ``""`` clears it."""
    ChannelConfig.objects.filter(pk=channel.pk).update(last_error=error[:2000])


# --- Keys --------------------------------------------------------------------------------


def _current_key_version(instance: Instance) -> int:
    stored = Instance.objects.filter(pk=instance.pk).values_list("key_version", flat=True).first()
    return int(stored or 1)


def instance_keys_rotate(*, instance: Instance) -> dict[str, Any]:
    """Rotate the instance's transit key and rewrap every secret and channel credential.

    Resumable: rows record the key version their data key was last wrapped with. When
    rows older than the instance's current version exist (an earlier run stopped half
    way), the key is not rotated again; the run finishes rewrapping them. Each row is
    saved on its own, so an interruption keeps the progress made.

    Returns ``{"instance": slug, "rotated": bool, "key_version": int,
    "secrets_rewrapped": int, "channels_rewrapped": int}``.

    Raises:
        openmates.vault.VaultError: Vault refuses the rotation or a rewrap.
    """
    key_name = _key_name(instance)
    current = _current_key_version(instance)
    behind = (
        InstanceSecret.objects.filter(instance=instance, key_version__lt=current).exists()
        or ChannelConfig.objects.filter(
            instance=instance, key_version__lt=current, credentials_sealed__isnull=False
        ).exists()
    )
    rotated = False
    if not behind:
        vault.ensure_key(key_name)
        current = vault.rotate_key(key_name)
        Instance.objects.filter(pk=instance.pk).update(key_version=current)
        instance.key_version = current
        crypto.forget_key(key_name)
        rotated = True
    secrets = 0
    for secret in InstanceSecret.objects.filter(instance=instance, key_version__lt=current):
        secret.sealed = crypto.rewrap_sealed(key_name, bytes(secret.sealed))
        secret.key_version = crypto.sealed_key_version(secret.sealed)
        secret.save(update_fields=["sealed", "key_version", "updated_at"])
        secrets += 1
    channels = 0
    pending = ChannelConfig.objects.filter(
        instance=instance, key_version__lt=current, credentials_sealed__isnull=False
    )
    for channel in pending:
        assert channel.credentials_sealed is not None
        rewrapped = crypto.rewrap_sealed(key_name, bytes(channel.credentials_sealed))
        channel.credentials_sealed = rewrapped
        channel.key_version = crypto.sealed_key_version(rewrapped)
        channel.save(update_fields=["credentials_sealed", "key_version", "updated_at"])
        channels += 1
    return {
        "instance": instance.slug,
        "rotated": rotated,
        "key_version": current,
        "secrets_rewrapped": secrets,
        "channels_rewrapped": channels,
    }


# --- Settings and mates (the REST API's writes) -------------------------------------------

# Instance fields an owner or admin may change through ``instance_settings_update``.
EDITABLE_FIELDS = frozenset(
    {
        "name",
        "default_language",
        "tier_map",
        "memory_enabled",
        "follow_ups_enabled",
        "model_preprocessing_enabled",
        "api_requests_per_minute",
        "api_tokens_per_day",
        "tools_offer_all_up_to",
        "model_tool_preselection",
    }
)


def instance_settings_update(*, instance: Instance, **fields: Any) -> Instance:
    """Change the named fields of ``instance`` (only :data:`EDITABLE_FIELDS`); caches and
    extensions are told on commit, as after an admin save.

    Raises:
        ValidationError: a field outside :data:`EDITABLE_FIELDS`, or a value the model's
            validation refuses (``tier_map_validate``, lengths), as ``message_dict``.
    """
    unknown = set(fields) - EDITABLE_FIELDS
    if unknown:
        raise ValidationError({name: ["cannot be changed"] for name in sorted(unknown)})
    for name, value in fields.items():
        setattr(instance, name, value)
    with transaction.atomic():
        instance.full_clean()
        instance.save(update_fields=[*fields, "updated_at"])
        instance_config_saved(instance=instance)
    return instance


def _mate_default_only(mate: Mate) -> None:
    """Make ``mate`` the instance's one default (the constraint allows one)."""
    Mate.objects.filter(instance_id=mate.instance_id, is_default=True).exclude(pk=mate.pk).update(
        is_default=False
    )


def mate_save(*, mate: Mate, **fields: Any) -> Mate:
    """Create or change a mate (``category``, ``name``, ``description``, ``system_prompt``,
    ``is_default``); a new default mate replaces the former one in the same transaction.

    Raises:
        ValidationError: a duplicate name or a bad category, as ``message_dict``.
    """
    for name, value in fields.items():
        setattr(mate, name, value)
    with transaction.atomic():
        mate.full_clean(validate_constraints=False)
        if Mate.objects.filter(instance_id=mate.instance_id, name=mate.name).exclude(pk=mate.pk):
            raise ValidationError({"name": ["a mate of this instance has this name"]})
        if mate.is_default:
            _mate_default_only(mate)
        mate.save()
    return mate


def mate_delete(*, mate: Mate) -> None:
    """Delete a mate; the turn picks another (the first one) from then on."""
    mate.delete()
