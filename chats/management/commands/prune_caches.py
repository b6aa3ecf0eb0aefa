"""``manage.py prune_caches [--user ID]``: remove the chat caches' Redis entries."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chats import cache


class Command(BaseCommand):
    help = "Remove AI, sync and embed cache entries of one user (--user) or of everyone."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", type=int, default=None, help="only this user's entries")

    def handle(self, *args: Any, **options: Any) -> None:
        removed = cache.prune(user_id=options["user"])
        who = f"user {options['user']}" if options["user"] is not None else "all users"
        self.stdout.write(f"removed {removed} cache entries of {who}")
