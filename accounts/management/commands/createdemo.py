"""``manage.py createdemo``: the demo user and instance of the embedded default (``runlocal``
runs it by name on every start)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from accounts.demo import demo_setup


class Command(BaseCommand):
    """Create (once) the user ``demo`` and the instance ``demo``; print how to sign in."""

    help = "Create the demo user and demo instance if missing and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        """--migrate."""
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="apply migrations first (runlocal: one process instead of two)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the idempotent demo set-up and print the sign-in."""
        if options["migrate"]:
            call_command("migrate", interactive=False, stdout=self.stdout)
        account = demo_setup(directory=settings.DATA_DIR)
        if account.password:
            self.stdout.write(
                f"Sign in as '{account.username}' with password '{account.password}' "
                f"(kept in {settings.DATA_DIR / 'demo_password'})."
            )
        else:
            self.stdout.write(
                f"Sign in as '{account.username}' with the password you set for it "
                "(python manage.py changepassword demo resets it)."
            )
        state = "created" if account.instance_created else "ready"
        self.stdout.write(f"Demo instance '{account.instance_slug}': {state}.")
