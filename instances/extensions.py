"""The explicit registry through which apps above ``instances`` take part in its services.

``instances`` may import nothing app-specific (docs/architecture.md §2), yet creating an instance
must seed its skills, a changed secret must recompute its tools, and an export must carry
its skill configuration. Apps that own such state (``skills``) register one
``InstanceExtension`` in their ``AppConfig.ready()``; the services here call every
registered extension explicitly and synchronously, inside their own transaction, so a
failing extension rolls the whole write back (unlike a signal, nothing happens later or
out of sight).
"""

from __future__ import annotations

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
