"""``manage.py invite --instance SLUG [--email ADDRESS] [--days N] [--base-url URL]``."""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import INVITATION_VALID_DAYS, invitation_create
from instances.models import Instance
from openmates.env import service_setting

FALLBACK_BASE_URL = "http://127.0.0.1:8000"


def served_url() -> str:
    """The address users reach the server at: ``OPENMATES_URL`` (set by runlocal for the
    port it serves, and recorded for the embedded default), else
    :data:`FALLBACK_BASE_URL`."""
    return settings.OPENMATES_URL or service_setting("OPENMATES_URL") or FALLBACK_BASE_URL


def _positive_days(text: str) -> int:
    """``--days``: a whole number of days, at least 1.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints its message).
    """
    try:
        days = int(text)
    except ValueError:
        days = 0
    if days < 1:
        raise argparse.ArgumentTypeError(
            f"the number of days must be a whole number, 1 or more (not {text!r})"
        )
    return days


class Command(BaseCommand):
    help = (
        "Create a one-use invitation to join an instance and print its sign-up link once "
        "on stdout (only the token's SHA-256 is stored). With --email only an account with "
        "that address may use it. The same can be done in the admin under Accounts → "
        "Invitations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--instance", required=True, help="Slug of the instance to join.")
        parser.add_argument("--email", default="", help="Only this address may use it.")
        parser.add_argument(
            "--days",
            type=_positive_days,
            default=INVITATION_VALID_DAYS,
            metavar="N",
            help=f"Valid for N days (a positive integer); default {INVITATION_VALID_DAYS}.",
        )
        parser.add_argument(
            "--base-url",
            default=None,
            help="The server's address as users reach it; default OPENMATES_URL (the address"
            f" the embedded default serves), else {FALLBACK_BASE_URL}.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        instance = Instance.objects.filter(slug=options["instance"]).first()
        if instance is None:
            raise CommandError(f"no instance {options['instance']!r}")
        try:
            invitation, token = invitation_create(
                instance=instance,
                created_by=None,
                email=options["email"],
                valid_days=options["days"],
            )
        except ValidationError:
            raise CommandError(
                f"--email {options['email']!r} is not an e-mail address (name@example.org)."
            ) from None
        base = options["base_url"] or served_url()
        link = f"{base.rstrip('/')}/accounts/signup/?invite={token}"
        self.stdout.write(link)
        who = invitation.email or "anyone"
        self.stderr.write(
            f"Invitation to {instance.name} for {who}, valid until "
            f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC; the link is shown only now."
        )
