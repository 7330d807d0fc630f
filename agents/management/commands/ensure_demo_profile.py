"""manage.py ensure_demo_profile: create the offline demo agent profile if it is missing."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from agents.profiles.demo import ensure_demo_profile


class Command(BaseCommand):
    help = "Create the demo agent profile (offline demo model and its extensions) if missing."

    def handle(self, *args: Any, **options: Any) -> None:
        profile, created = ensure_demo_profile()
        verb = "Created" if created else "Kept"
        self.stdout.write(f"{verb} the agent profile {profile.name!r} (slug {profile.slug}).")
