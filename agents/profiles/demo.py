"""The demo agent profiles: the offline model with demo tools, questions and steering.

``demo`` answers at reading speed. ``slow-demo`` writes long answers slowly and asks before it
calculates, so steering, cancelling, approving and the monitor can be tried by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ..models import AgentProfile, ExtensionSetting

DEMO_SLUG = "demo"
SLOW_DEMO_SLUG = "slow-demo"


@dataclass(frozen=True, slots=True)
class _DemoProfile:
    slug: str
    fields: dict[str, Any]
    extensions: tuple[tuple[str, int, dict[str, object]], ...]


_TRY = (
    "Try: “what is 6*(7+1)?” (the calculator), “what time is it?” (the clock), “ask: what "
    "should I name the project?” (it asks you back), anything else (it echoes you)."
)

DEMO_PROFILES: tuple[_DemoProfile, ...] = (
    _DemoProfile(
        DEMO_SLUG,
        {
            "name": "Demo agent",
            "description": "Offline demo model: arithmetic with the calculator, the time with "
            "the clock, 'ask: <question>' asks you back, and an echo for everything else. "
            "No network needed. " + _TRY,
            "provider": "demo",
            "model_name": "demo",
            "provider_settings": {"delay": 0.03},
            "system_prompt": "You are a helpful assistant.",
        },
        (
            ("session_store", 10, {}),
            ("demo_tools", 100, {"tools": ["calculator", "clock"]}),
            ("ask_user", 100, {}),
            ("steering", 100, {}),
        ),
    ),
    _DemoProfile(
        SLOW_DEMO_SLUG,
        {
            "name": "Slow demo agent",
            "description": "The offline demo model, slowed down to try the controls by hand: "
            "answers of 60 words at about three words a second, so there is time to steer "
            "(send a second message), press Stop, or watch it on the monitor; the calculator "
            "waits for your approval. No network needed. " + _TRY,
            "provider": "demo",
            "model_name": "demo",
            "provider_settings": {"delay": 0.3, "reply_words": 60},
            "system_prompt": "You are a helpful assistant.",
        },
        (
            ("session_store", 10, {}),
            ("demo_tools", 100, {"tools": ["calculator", "clock"]}),
            ("tool_approval", 100, {"tools": ["calculator"]}),
            ("ask_user", 100, {}),
            ("steering", 100, {}),
        ),
    ),
)


def ensure_demo_profiles() -> list[tuple[AgentProfile, bool]]:
    """Create each demo profile with its extensions unless its slug exists; [(profile, created)].

    An existing profile is left exactly as an admin may have changed it.
    """
    return [_ensure(spec) for spec in DEMO_PROFILES]


def ensure_demo_profile() -> tuple[AgentProfile, bool]:
    """The ``demo`` profile (and the slow one) created if missing; (demo profile, created)."""
    return ensure_demo_profiles()[0]


def _ensure(spec: _DemoProfile) -> tuple[AgentProfile, bool]:
    with transaction.atomic():
        profile, created = AgentProfile.objects.get_or_create(slug=spec.slug, defaults=spec.fields)
        if created:
            ExtensionSetting.objects.bulk_create(
                ExtensionSetting(
                    profile=profile,
                    key=key,
                    priority=priority,
                    settings=settings,
                    position=position,
                )
                for position, (key, priority, settings) in enumerate(spec.extensions)
            )
    return profile, created
