"""``manage.py revoke_api_key PREFIX``: revoke an API token; its sockets close (4401)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.selectors import api_token_get_by_prefix
from accounts.services import api_token_revoke


class Command(BaseCommand):
    help = (
        "Revoke the API token with this prefix (the 12 hex characters after 'om_'; a whole "
        "token is accepted too). Requests with it answer 401 from now on and its open "
        "WebSockets close with code 4401."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", help="The token's prefix, e.g. 3f9a0c1b2d4e.")

    def handle(self, *args: Any, **options: Any) -> None:
        prefix = options["prefix"].strip().removeprefix("om_").partition("_")[0]
        token = api_token_get_by_prefix(prefix) if prefix else None
        if token is None:
            raise CommandError(f"no API token with prefix {prefix!r}")
        already = token.revoked_at is not None
        api_token_revoke(token=token)
        state = "was already revoked" if already else "revoked"
        self.stdout.write(f"API token {token.name!r} ({token.prefix}) of {token.user} {state}")
