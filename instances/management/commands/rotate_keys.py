"""``manage.py rotate_keys [SLUG ...]``: rotate instance transit keys, rewrap every secret.

Resumable: run it again after an interruption and it finishes rewrapping without
rotating a second time. Needs the admin Vault token (VAULT_ADMIN_TOKEN).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.models import Instance
from instances.services import instance_keys_rotate
from openmates.vault import VaultError


class Command(BaseCommand):
    help = "Rotate instance transit keys and rewrap their secrets and channel credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="*", help="Instances to rotate (default: all).")

    def handle(self, *args: Any, **options: Any) -> None:
        instances = Instance.objects.order_by("pk")
        if options["slugs"]:
            instances = instances.filter(slug__in=options["slugs"])
            missing = set(options["slugs"]) - set(instances.values_list("slug", flat=True))
            if missing:
                raise CommandError(f"no such instance: {', '.join(sorted(missing))}")
        totals = {"instances": 0, "rotated": 0, "secrets": 0, "channels": 0}
        for instance in instances:
            try:
                result = instance_keys_rotate(instance=instance)
            except VaultError as exc:
                raise CommandError(
                    f"{instance.slug}: {exc} (progress is kept; run the command again)"
                ) from exc
            totals["instances"] += 1
            totals["rotated"] += int(result["rotated"])
            totals["secrets"] += result["secrets_rewrapped"]
            totals["channels"] += result["channels_rewrapped"]
            self.stdout.write(
                f"{instance.slug}: key v{result['key_version']}"
                f"{'' if result['rotated'] else ' (resumed)'}, "
                f"{result['secrets_rewrapped']} secrets, "
                f"{result['channels_rewrapped']} channel credentials rewrapped"
            )
        self.stdout.write(
            f"instances: {totals['instances']}, keys rotated: {totals['rotated']}, "
            f"secrets rewrapped: {totals['secrets']}, "
            f"channel credentials rewrapped: {totals['channels']}"
        )
