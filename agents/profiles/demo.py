"""The demo agent profile: the offline model with demo tools, questions and steering."""

from __future__ import annotations

from ..models import AgentProfile, ExtensionSetting

DEMO_SLUG = "demo"

DEMO_EXTENSIONS: tuple[tuple[str, int, dict[str, object]], ...] = (
    ("session_store", 10, {}),
    ("demo_tools", 100, {"tools": ["calculator", "clock"]}),
    ("ask_user", 100, {}),
    ("steering", 100, {}),
)


def ensure_demo_profile() -> tuple[AgentProfile, bool]:
    """Create the demo profile with its extensions unless it exists; (profile, created)."""
    profile, created = AgentProfile.objects.get_or_create(
        slug=DEMO_SLUG,
        defaults={
            "name": "Demo agent",
            "description": "Offline demo model: arithmetic with the calculator, the time with "
            "the clock, 'ask: <question>' asks you back, and an echo for everything else. "
            "No network needed.",
            "provider": "demo",
            "model_name": "demo",
            "provider_settings": {"delay": 0.03},
            "system_prompt": "You are a helpful assistant.",
        },
    )
    if created:
        ExtensionSetting.objects.bulk_create(
            ExtensionSetting(
                profile=profile, key=key, priority=priority, settings=settings, position=position
            )
            for position, (key, priority, settings) in enumerate(DEMO_EXTENSIONS)
        )
    return profile, created
