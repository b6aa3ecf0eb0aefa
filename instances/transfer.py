"""Export and import of an instance's configuration as JSON (never its secrets).

The document::

    {"format": "openmates.instance/1",
     "instance": {"slug", "name", "default_language", "tier_map", "embedding_model",
                  "embedding_dimensions", "memory_enabled", "follow_ups_enabled",
                  "model_preprocessing_enabled"},
     "prompt_sections": {"identity": "...", ...},
     "mates": [{"category", "name", "description", "system_prompt", "is_default"}],
     "members": [{"username", "role"}],
     "secrets": ["OPENAI_API_KEY", ...],            # names only
     "channels": [{"kind", "enabled"}],              # credentials never
     "<extension section>": ...}                     # e.g. "skills"

Import is idempotent: running it twice changes nothing the second time. A value that
differs from the database is a conflict, reported and kept, unless ``overwrite=True``.
The document's shape is checked against ``DOCUMENT_SCHEMA`` before anything is written;
members are imported only with ``with_members=True`` (they grant roles to whichever local
user has the same username), otherwise each is reported as skipped.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from instances.extensions import ImportReport, extensions
from instances.languages import LANGUAGE_CODE_RE
from instances.models import ChannelConfig, Instance, InstanceMember, Mate, PromptSection
from instances.services import instance_config_saved, instance_create

FORMAT = "openmates.instance/1"
INSTANCE_FIELDS = (
    "name",
    "default_language",
    "tier_map",
    "embedding_model",
    "embedding_dimensions",
    "memory_enabled",
    "follow_ups_enabled",
    "model_preprocessing_enabled",
)
MATE_FIELDS = ("category", "description", "system_prompt", "is_default")

_STRING = {"type": "string"}
_BOOLEAN = {"type": "boolean"}
DOCUMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "instance"],
    "properties": {
        "format": {"const": FORMAT},
        "instance": {
            "type": "object",
            "required": ["slug"],
            "properties": {
                "slug": {"type": "string", "pattern": r"^[-a-zA-Z0-9_]{1,64}$"},
                "name": {"type": "string", "maxLength": 200},
                "default_language": {"type": "string", "pattern": LANGUAGE_CODE_RE.pattern},
                "tier_map": {"type": "object"},
                "embedding_model": {"type": "string", "maxLength": 200},
                "embedding_dimensions": {"type": "integer", "minimum": 1},
                "memory_enabled": _BOOLEAN,
                "follow_ups_enabled": _BOOLEAN,
                "model_preprocessing_enabled": _BOOLEAN,
            },
        },
        "prompt_sections": {"type": "object", "additionalProperties": _STRING},
        "mates": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 100},
                    "category": {"type": "string", "pattern": r"^[-a-zA-Z0-9_]{1,64}$"},
                    "description": _STRING,
                    "system_prompt": _STRING,
                    "is_default": _BOOLEAN,
                },
            },
        },
        "members": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["username", "role"],
                "properties": {
                    "username": {"type": "string", "minLength": 1, "maxLength": 150},
                    "role": {"enum": list(InstanceMember.Role.values)},
                },
            },
        },
        "secrets": {"type": "array", "items": {"type": "string", "maxLength": 100}},
        "channels": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["kind"],
                "properties": {
                    "kind": {"enum": list(ChannelConfig.Kind.values)},
                    "enabled": _BOOLEAN,
                },
            },
        },
        # The skills app's section (its InstanceExtension's export shape).
        "skills": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["skill", "version"],
                "properties": {
                    "skill": {"type": "string", "minLength": 1},
                    "version": {"type": "integer", "minimum": 1},
                    "enabled": _BOOLEAN,
                },
            },
        },
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(DOCUMENT_SCHEMA)


def _unstorable_string(document: Any) -> str | None:
    """JSON path of the first string (key or value) PostgreSQL cannot store, if any.

    That is a NUL character or a lone UTF-16 surrogate (not encodable as UTF-8).
    """
    stack: list[tuple[str, Any]] = [("$", document)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                stack.append((f"{where}.{key}", key))
                stack.append((f"{where}.{key}", value))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", value) for i, value in enumerate(item))
        elif isinstance(item, str):
            if "\x00" in item:
                return where
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return where
    return None


def document_validate(document: Any) -> None:
    """Check an import document's shape (``DOCUMENT_SCHEMA``) before anything is written.

    Raises:
        ValidationError: one message, ``"<JSON path>: <problem>"`` for the first bad
            field, e.g. ``"$.mates: 'x' is not of type 'array'"``.
    """
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValidationError(f"not an instance export (expected format {FORMAT!r})")
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(document))
    if error is not None:
        message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
        raise ValidationError(f"{error.json_path}: {message}")
    where = _unstorable_string(document)
    if where is not None:
        raise ValidationError(f"{where}: a NUL character or lone surrogate is not allowed")


def instance_export(instance: Instance) -> dict[str, Any]:
    """The configuration of ``instance`` as a JSON-ready document (module docstring)."""
    document: dict[str, Any] = {
        "format": FORMAT,
        "instance": {"slug": instance.slug, **{f: getattr(instance, f) for f in INSTANCE_FIELDS}},
        "prompt_sections": dict(
            PromptSection.objects.filter(instance=instance)
            .order_by("key")
            .values_list("key", "content")
        ),
        "mates": [
            {"name": mate.name, **{f: getattr(mate, f) for f in MATE_FIELDS}}
            for mate in Mate.objects.filter(instance=instance).order_by("name")
        ],
        "members": [
            {"username": m.user.get_username(), "role": m.role}
            for m in InstanceMember.objects.filter(instance=instance)
            .select_related("user")
            .order_by("user__username")
        ],
        "secrets": sorted(instance.secrets.values_list("name", flat=True)),
        "channels": [
            {"kind": c.kind, "enabled": c.enabled}
            for c in ChannelConfig.objects.filter(instance=instance).order_by("kind")
        ],
    }
    for extension in extensions():
        document[extension.section] = extension.instance_export(instance)
    return document


def _apply(
    obj: Any, values: dict[str, Any], label: str, *, overwrite: bool, report: ImportReport
) -> bool:
    """Compare ``values`` with ``obj``; set them when allowed. Returns whether to save."""
    differing = {k: v for k, v in values.items() if getattr(obj, k) != v}
    if not differing:
        report.unchanged.append(label)
        return False
    if not overwrite:
        report.conflicts.append(f"{label}: differs in {', '.join(sorted(differing))} (kept)")
        return False
    for key, value in differing.items():
        setattr(obj, key, value)
    report.updated.append(label)
    return True


def _import_instance(
    data: dict[str, Any], owner: Any, *, overwrite: bool, report: ImportReport
) -> tuple[Instance, bool]:
    fields = {k: data[k] for k in INSTANCE_FIELDS if k in data}
    slug = str(data.get("slug", ""))
    instance = Instance.objects.filter(slug=slug).first()
    if instance is None:
        instance = instance_create(slug=slug, owner=owner, **fields)
        report.created.append(f"instance {slug}")
        return instance, True
    if _apply(instance, fields, f"instance {slug}", overwrite=overwrite, report=report):
        instance.full_clean()
        instance.save()
    return instance, False


def _import_prompts(
    instance: Instance, sections: dict[str, str], *, overwrite: bool, report: ImportReport
) -> None:
    for key, content in sections.items():
        if key not in PromptSection.Key.values:
            report.conflicts.append(f"prompt {key}: not a prompt section here (skipped)")
            continue
        section, created = PromptSection.objects.get_or_create(
            instance=instance, key=key, defaults={"content": content}
        )
        if created:
            report.created.append(f"prompt {key}")
        elif _apply(
            section, {"content": content}, f"prompt {key}", overwrite=overwrite, report=report
        ):
            section.save()


def _import_mates(
    instance: Instance, mates: list[dict[str, Any]], *, overwrite: bool, report: ImportReport
) -> None:
    for item in mates:
        values = {f: item[f] for f in MATE_FIELDS if f in item}
        label = f"mate {item['name']}"
        mate = Mate.objects.filter(instance=instance, name=item["name"]).first()
        if mate is None:
            if values.get("is_default"):
                Mate.objects.filter(instance=instance, is_default=True).update(is_default=False)
            Mate.objects.create(instance=instance, name=item["name"], **values)
            report.created.append(label)
        elif _apply(mate, values, label, overwrite=overwrite, report=report):
            if mate.is_default:
                Mate.objects.filter(instance=instance, is_default=True).exclude(pk=mate.pk).update(
                    is_default=False
                )
            mate.save()


def _import_members(
    instance: Instance,
    members: list[dict[str, Any]],
    *,
    overwrite: bool,
    report: ImportReport,
    with_members: bool,
) -> None:
    users = get_user_model().objects
    for item in members:
        username, role = item["username"], item["role"]
        label = f"member {username}"
        if not with_members:
            report.conflicts.append(
                f"{label} ({role}): skipped; members are imported only on request"
            )
            continue
        user = users.filter(**{get_user_model().USERNAME_FIELD: username}).first()
        if user is None:
            report.conflicts.append(f"{label}: no such user here (skipped)")
            continue
        member = InstanceMember.objects.filter(instance=instance, user=user).first()
        if member is None:
            InstanceMember.objects.create(instance=instance, user=user, role=role)
            report.created.append(label)
        elif _apply(member, {"role": role}, label, overwrite=overwrite, report=report):
            member.save()


def _import_channels(
    instance: Instance, channels: list[dict[str, Any]], *, overwrite: bool, report: ImportReport
) -> None:
    for item in channels:
        kind = item["kind"]
        label = f"channel {kind}"
        channel = ChannelConfig.objects.filter(instance=instance, kind=kind).first()
        if channel is None:
            # Credentials never travel: the channel arrives disabled until they are set.
            ChannelConfig.objects.create(instance=instance, kind=kind, enabled=False)
            report.created.append(label)
            if item.get("enabled"):
                report.conflicts.append(f"{label}: set its credentials, then enable it")
        else:
            report.unchanged.append(label)


@transaction.atomic
def instance_import(
    document: Any, *, owner: Any, overwrite: bool = False, with_members: bool = False
) -> ImportReport:
    """Create or update the instance a document describes; returns what happened.

    ``owner`` owns the instance when the import creates it. Secrets listed by name that
    are not set here are reported as conflicts ("set it"); values never travel. Members
    (roles granted to local users matched by username) are applied only when
    ``with_members``; otherwise each is reported as a skipped conflict.

    Raises:
        ValidationError: not an ``openmates.instance/1`` document, a field of the wrong
            shape (the message names its JSON path, see ``document_validate``), or
            invalid values.
    """
    document_validate(document)
    report = ImportReport(instance=str(document["instance"].get("slug", "")))
    instance, created = _import_instance(
        document["instance"], owner, overwrite=overwrite, report=report
    )
    # A new instance holds only the defaults ``instance_create`` seeded: the file wins.
    overwrite = overwrite or created
    _import_prompts(
        instance, document.get("prompt_sections", {}), overwrite=overwrite, report=report
    )
    _import_mates(instance, document.get("mates", []), overwrite=overwrite, report=report)
    _import_members(
        instance,
        document.get("members", []),
        overwrite=overwrite,
        report=report,
        with_members=with_members,
    )
    _import_channels(instance, document.get("channels", []), overwrite=overwrite, report=report)
    present = set(instance.secrets.values_list("name", flat=True))
    for name in document.get("secrets", []):
        if name not in present:
            report.conflicts.append(
                f"secret {name}: not set here; set it (values are not exported)"
            )
    for extension in extensions():
        if extension.section in document:
            extension.instance_import(
                instance, document[extension.section], overwrite=overwrite, report=report
            )
    instance_config_saved(instance=instance)
    return report
