"""``manage.py create_api_key (--user USERNAME | --instance SLUG) --name NAME
[--expires-days N]``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.instance_keys import InstanceKeyInvalidError, instance_key_create
from accounts.services import ApiTokenInvalidError, ApiTokenLimitError, api_token_create
from instances.models import Instance


def _positive_days(text: str) -> int:
    days = int(text)
    if days < 1:
        raise ValueError(text)
    return days


class Command(BaseCommand):
    help = (
        "Create an API key and print it once on stdout (only its digest is stored). "
        "With --user: a user's API token ('om_…') for /api/, /ws/chat/ and /v1 (as that user, "
        "for the instances they belong to); use it as 'Authorization: Bearer <token>' or as "
        "the WebSocket subprotocol 'openmates.token.<token>' offered with 'openmates.v1'; the "
        "per-user limits of the account page apply. With --instance: an instance key "
        "('omk_…') for /v1 only, with a pseudo-user of its own (docs/api.md §4). Revoke "
        "either with 'manage.py revoke_api_key PREFIX'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        owner = parser.add_mutually_exclusive_group(required=True)
        owner.add_argument("--user", help="Username of the token's owner.")
        owner.add_argument("--instance", help="Slug of the instance the /v1 key is for.")
        parser.add_argument("--name", help="What the key is for (1-100 chars).")
        parser.add_argument(
            "--expires-days",
            type=_positive_days,
            default=None,
            metavar="N",
            help="Expire after N days (a positive integer); default: never.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["expires_days"]
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        until = f"until {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "no expiry"
        if options["instance"]:
            self._instance_key(options["instance"], options["name"], expires_at, until)
            return
        if not options["name"]:
            raise CommandError("--name is required with --user")
        user = User.objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        if not user.is_active:
            raise CommandError(f"user {options['user']!r} is inactive")
        try:
            token, raw = api_token_create(user=user, name=options["name"], expires_at=expires_at)
        except (ApiTokenInvalidError, ApiTokenLimitError) as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"created API token {token.name!r} (prefix {token.prefix}, {until}) for "
            f"{user.username}; it is shown once:"
        )
        self.stdout.write(raw)

    def _instance_key(
        self, slug: str, name: str | None, expires_at: datetime | None, until: str
    ) -> None:
        instance = Instance.objects.filter(slug=slug).first()
        if instance is None:
            raise CommandError(f"no instance {slug!r}")
        try:
            key, raw = instance_key_create(
                instance=instance, name=name or "API key", expires_at=expires_at
            )
        except InstanceKeyInvalidError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"created /v1 key {key.name!r} (prefix {key.prefix}, {until}) for instance "
            f"{instance.slug}; it is shown once:"
        )
        self.stdout.write(raw)
