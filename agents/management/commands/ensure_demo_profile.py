"""manage.py ensure_demo_profile: create the offline demo agent profiles if they are missing."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from agents.profiles.demo import ensure_demo_profiles


class Command(BaseCommand):
    help = (
        "Create the demo agent profiles (the offline demo model, and a slow one for trying "
        "steering, stop and approvals by hand) if missing."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for profile, created in ensure_demo_profiles():
            verb = "Created" if created else "Kept"
            self.stdout.write(f"{verb} the agent profile {profile.name!r} (slug {profile.slug}).")
