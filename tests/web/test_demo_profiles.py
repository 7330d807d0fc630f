"""The shipped demo profiles: created once, never overwritten, and each does what it promises."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from agents.extensions.approval import ToolApprovalExtension
from agents.models import AgentProfile
from agents.profiles.catalog import build_agent_for_profile
from agents.profiles.demo import DEMO_SLUG, SLOW_DEMO_SLUG

pytestmark = pytest.mark.django_db


def test_the_command_creates_both_profiles_once_and_keeps_admin_changes() -> None:
    first = StringIO()
    call_command("ensure_demo_profile", stdout=first)
    assert "Created the agent profile 'Demo agent'" in first.getvalue()
    assert "Created the agent profile 'Slow demo agent'" in first.getvalue()
    slow = AgentProfile.objects.get(slug=SLOW_DEMO_SLUG)
    slow.provider_settings = {"delay": 1.0}
    slow.save()

    second = StringIO()
    call_command("ensure_demo_profile", stdout=second)
    assert "Kept the agent profile 'Slow demo agent'" in second.getvalue()
    assert AgentProfile.objects.filter(slug__in=[DEMO_SLUG, SLOW_DEMO_SLUG]).count() == 2
    assert AgentProfile.objects.get(slug=SLOW_DEMO_SLUG).provider_settings == {"delay": 1.0}


def _agent(slug: str):
    call_command("ensure_demo_profile", stdout=StringIO())
    profile = AgentProfile.objects.get(slug=slug)
    return profile, build_agent_for_profile(profile, list(profile.extensions.all()), persist=False)


def test_the_slow_demo_answers_slowly_at_length() -> None:
    profile, agent = _agent(SLOW_DEMO_SLUG)
    assert profile.description and "Stop" in profile.description
    assert agent.model.delay >= 0.3  # about three words a second: time to steer or stop
    assert len(agent.model._reply("hello").split()) >= 60


def test_the_slow_demo_asks_approval_for_the_calculator_only() -> None:
    _, agent = _agent(SLOW_DEMO_SLUG)
    approval = next(e for e in agent.extensions if isinstance(e, ToolApprovalExtension))
    assert approval.settings.tools == ["calculator"]


def test_the_fast_demo_does_not_ask_for_approval() -> None:
    _, agent = _agent(DEMO_SLUG)
    assert not any(isinstance(e, ToolApprovalExtension) for e in agent.extensions)
    assert agent.model.delay < 0.1


def test_a_profile_can_offer_the_wait_tool_and_a_first_token_delay() -> None:
    from agents.models import ExtensionSetting

    profile = AgentProfile.objects.create(
        name="Load",
        slug="load",
        provider="demo",
        model_name="demo",
        provider_settings={"delay": 0, "first_token_delay": 0.5},
    )
    ExtensionSetting.objects.create(
        profile=profile, key="demo_tools", settings={"tools": ["wait"]}, position=0
    )
    agent = build_agent_for_profile(profile, list(profile.extensions.all()), persist=False)

    assert agent.model.first_token_delay == 0.5
    (tools,) = [e for e in agent.extensions if type(e).__name__ == "DemoToolsExtension"]
    assert [t.name for t in tools._tools] == ["wait"]
