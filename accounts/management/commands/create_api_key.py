"""``manage.py create_api_key --user USERNAME --name NAME [--expires-days N]``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.services import ApiTokenInvalidError, ApiTokenLimitError, api_token_create


def _positive_days(text: str) -> int:
    days = int(text)
    if days < 1:
        raise ValueError(text)
    return days


class Command(BaseCommand):
    help = (
        "Create an API token for a user and print it once on stdout (only its digest is "
        "stored). Use it as 'Authorization: Bearer <token>' for /api/ and /ws/chat/, or as "
        "the WebSocket subprotocol 'openmates.token.<token>' offered together with "
        "'openmates.v1'. Revoke it with 'manage.py revoke_api_key PREFIX'. The per-user limits "
        "of the account page apply (tokens per hour, active tokens)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="Username of the token's owner.")
        parser.add_argument("--name", required=True, help="What the token is for (1-100 chars).")
        parser.add_argument(
            "--expires-days",
            type=_positive_days,
            default=None,
            metavar="N",
            help="Expire after N days (a positive integer); default: never.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        if not user.is_active:
            raise CommandError(f"user {options['user']!r} is inactive")
        days = options["expires_days"]
        expires_at = timezone.now() + timedelta(days=days) if days is not None else None
        try:
            token, raw = api_token_create(user=user, name=options["name"], expires_at=expires_at)
        except (ApiTokenInvalidError, ApiTokenLimitError) as exc:
            raise CommandError(str(exc)) from exc
        until = f"until {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "no expiry"
        self.stderr.write(
            f"created API token {token.name!r} (prefix {token.prefix}, {until}) for "
            f"{user.username}; it is shown once:"
        )
        self.stdout.write(raw)
