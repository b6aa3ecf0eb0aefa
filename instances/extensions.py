"""The explicit registry through which apps above ``instances`` take part in its services.

``instances`` may import nothing app-specific (docs/architecture.md §2), yet creating an instance
must seed its skills, a changed secret must recompute its tools, an export must carry
its skill configuration, and deleting it must delete the keys of its memories. Apps that
own such state register one ``InstanceExtension`` (``skills``) or ``InstanceDataOwner``
(``memories``) in their ``AppConfig.ready()``; the services here call every
registered extension explicitly and synchronously, inside their own transaction, so a
failing extension rolls the whole write back (unlike a signal, nothing happens later or
out of sight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from instances.models import Instance


@dataclass
class ImportReport:
    """What ``instance_import`` did: names of objects per outcome, and conflicts.

    ``conflicts`` lists, in words, every value in the file that differs from the database
    and was left alone (``overwrite=False``), and everything the file names that cannot be
    resolved here (an unknown user, a missing skill version, a secret still to be set).
    """

    instance: str = ""
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form for the management command."""
        return {
            "instance": self.instance,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "conflicts": self.conflicts,
        }


class InstanceExtension(Protocol):
    """An app's part in an instance's life cycle. ``section`` names its export key."""

    section: str

    def instance_created(self, instance: Instance) -> None:
        """Seed the app's defaults for a new instance (runs inside ``instance_create``)."""

    def instance_config_changed(self, instance: Instance) -> None:
        """Recompute what depends on the instance's secrets or skills."""

    def instance_export(self, instance: Instance) -> Any:
        """Return the app's configuration of ``instance`` as JSON-ready data (no secrets)."""

    def instance_import(
        self, instance: Instance, section: Any, *, overwrite: bool, report: ImportReport
    ) -> None:
        """Apply an exported section idempotently, recording outcomes in ``report``."""


_extensions: dict[str, InstanceExtension] = {}


def extension_register(extension: InstanceExtension) -> None:
    """Register ``extension`` under its ``section``; registering the same one again is a no-op.

    Raises:
        ValueError: another extension already holds that section name.
    """
    current = _extensions.get(extension.section)
    if current is not None and current is not extension:
        raise ValueError(f"instance extension section {extension.section!r} is taken")
    _extensions[extension.section] = extension


def extensions() -> list[InstanceExtension]:
    """The registered extensions in registration order."""
    return list(_extensions.values())


class InstanceDataOwner(Protocol):
    """An app whose data of an instance outlives the rows' cascade (transit keys of its
    own in Vault). ``name`` identifies it (its app label)."""

    name: str

    def instance_data_delete(self, instance: Instance) -> Callable[[], None] | None:
        """Runs inside ``instance_delete``'s transaction, before the instance row is
        deleted: lock and read what the cascade will remove and return what to run once
        the deletion has committed (deleting the app's keys), or ``None``. Raising rolls
        the deletion back."""


_data_owners: dict[str, InstanceDataOwner] = {}


def instance_data_owner_register(owner: InstanceDataOwner) -> None:
    """Register ``owner`` under its ``name``; registering the same one again is a no-op.

    Raises:
        ValueError: another owner already holds that name.
    """
    current = _data_owners.get(owner.name)
    if current is not None and current is not owner:
        raise ValueError(f"instance data owner {owner.name!r} is already registered")
    _data_owners[owner.name] = owner


def instance_data_owners() -> list[InstanceDataOwner]:
    """The registered owners in registration order."""
    return list(_data_owners.values())
