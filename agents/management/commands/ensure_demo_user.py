"""`manage.py ensure_demo_user`: the local superuser that `make run` logs in with."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Create the demo superuser (DEMO_USERNAME / DEMO_PASSWORD, default demo / demo) if it "
        "does not exist yet, and print how to log in. An existing user is left unchanged."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url",
            default="http://127.0.0.1:8000/login/",
            help="The login URL to print (default: %(default)s).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username = os.environ.get("DEMO_USERNAME") or "demo"
        password = os.environ.get("DEMO_PASSWORD") or "demo"
        users = get_user_model()
        if users.objects.filter(username=username).exists():
            self.stdout.write(f"Demo user {username!r} already exists; left unchanged.")
            how = f"with its existing password (created as {password!r})"
        else:
            # create_superuser skips the password validators on purpose: a local demo login.
            users.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(self.style.SUCCESS(f"Created demo superuser {username!r}."))
            how = f"with password {password!r}"
        self.stdout.write(f"Log in at {options['url']} as {username!r} {how}.")
