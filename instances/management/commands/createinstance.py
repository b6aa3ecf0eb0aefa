"""``manage.py createinstance SLUG NAME OWNER``: an instance with its default configuration."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from instances.languages import LANGUAGE_CODE_RE
from instances.services import instance_create


class Command(BaseCommand):
    help = "Create an instance (prompts, default mate, default skills, transit key)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("name")
        parser.add_argument("owner", help="Username of the owner (must exist).")
        parser.add_argument(
            "--language", default="en", help="Default language, a BCP 47 code (en, de-CH)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        owner = user_model.objects.filter(**{user_model.USERNAME_FIELD: options["owner"]}).first()
        if owner is None:
            raise CommandError(f"no user {options['owner']!r}")
        if not LANGUAGE_CODE_RE.fullmatch(options["language"]):
            raise CommandError(
                f"invalid language code {options['language']!r} "
                "(expected a BCP 47 code such as en, de-CH, zh-Hant-TW or es-419)"
            )
        try:
            instance = instance_create(
                slug=options["slug"],
                name=options["name"],
                owner=owner,
                default_language=options["language"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"created instance {instance.slug} (id {instance.pk})")
