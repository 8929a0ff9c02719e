"""`manage.py token_create USERNAME --name NAME [--study SLUG] [--write]`: print a new API token.

The secret is printed once; only its hash is stored. stdout carries the secret and nothing
else (the note about the token, errors and the project's logs go to stderr), so that
`TOKEN=$(python manage.py token_create alice --write)` captures exactly the secret.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviewhub.errors import AppError
from studies.models import Study
from studies.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a user and print its secret (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="A label for the token.")
        parser.add_argument("--study", help="Slug of the one study the token may act in "
                                            "(default: the whole account).")
        parser.add_argument("--write", action="store_true",
                            help="Read-write (default: read-only).")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user '{options['username']}'.")
        study = None
        if options.get("study"):
            study = Study.objects.filter(slug=options["study"]).first()
            if study is None:
                raise CommandError(f"No study '{options['study']}'.")
        try:
            token, secret = api_token_create(user=user, name=options["name"], study=study,
                                             can_write=options["write"])
        except AppError as exc:
            raise CommandError(exc.message) from exc
        scope = f"study '{study.slug}'" if study else "whole account"
        mode = "read-write" if token.can_write else "read-only"
        self.stderr.write(f"Token {token.prefix}… for {user.get_username()} ({scope}, {mode}). "
                          "The secret below is shown only once:")
        self.stdout.write(secret)
