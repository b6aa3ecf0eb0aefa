"""``manage.py revoke_api_key PREFIX``: revoke a user's API token (its sockets close with
4401) or an instance's /v1 key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.instance_keys import instance_key_get_by_prefix, instance_key_revoke
from accounts.selectors import api_token_get_by_prefix
from accounts.services import api_token_revoke


class Command(BaseCommand):
    help = (
        "Revoke the API token or instance key with this prefix (the 12 hex characters after "
        "'om_' or 'omk_'; a whole token or key is accepted too). Requests with it answer 401 "
        "from now on; a user token's open WebSockets close with code 4401."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", help="The prefix, e.g. 3f9a0c1b2d4e.")

    def handle(self, *args: Any, **options: Any) -> None:
        text = options["prefix"].strip()
        instance_key = text.startswith("omk_")
        prefix = text.removeprefix("omk_").removeprefix("om_").partition("_")[0]
        if not prefix:
            raise CommandError(f"no API token with prefix {prefix!r}")
        token = None if instance_key else api_token_get_by_prefix(prefix)
        if token is not None:
            already = token.revoked_at is not None
            api_token_revoke(token=token)
            state = "was already revoked" if already else "revoked"
            self.stdout.write(f"API token {token.name!r} ({token.prefix}) of {token.user} {state}")
            return
        key = instance_key_get_by_prefix(prefix)
        if key is None:
            raise CommandError(f"no API token with prefix {prefix!r}")
        already = key.revoked_at is not None
        instance_key_revoke(key=key)
        state = "was already revoked" if already else "revoked"
        self.stdout.write(f"/v1 key {key.name!r} ({key.prefix}) of {key.instance.slug} {state}")
