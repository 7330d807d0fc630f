"""AgentCache: one Agent per profile, rebuilt when an admin edits the profile or its extensions."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import AgentProfile, ExtensionSetting, Message
from agents.profiles.cache import AgentCache


def _profile(**fields: Any) -> AgentProfile:
    return AgentProfile.objects.create(
        name="Cached",
        slug="cached",
        provider="demo",
        model_name="demo",
        provider_settings={"delay": 0},
        **fields,
    )


def _extension_rows(profile_pk: int) -> tuple[Any, ...]:
    """The profile's rows as intake reads them for the cache."""
    return tuple(
        ExtensionSetting.objects.filter(profile_id=profile_pk)
        .order_by("position", "id")
        .values_list("key", "instance_name", "enabled", "priority", "settings")
    )


def _names(agent: Any) -> list[str]:
    return [extension.name for extension in agent.extensions]


@pytest.mark.django_db
def test_an_unchanged_profile_keeps_its_agent() -> None:
    cache = AgentCache()
    profile = _profile()
    first = cache.agent_for(profile, _extension_rows(profile.pk))
    again = AgentProfile.objects.get(pk=profile.pk)  # a fresh load, as every intake does
    assert cache.agent_for(again, _extension_rows(profile.pk)) is first


@pytest.mark.django_db
def test_an_edited_profile_gets_a_new_agent_built_from_the_edit() -> None:
    cache = AgentCache()
    profile = _profile(system_prompt="Be brief.", max_iterations=5)
    before = cache.agent_for(profile, _extension_rows(profile.pk))
    assert (before.system_prompt, before.max_iterations) == ("Be brief.", 5)

    edited = AgentProfile.objects.get(pk=profile.pk)
    edited.system_prompt = "Be thorough."
    edited.max_iterations = 9
    edited.save()
    after = cache.agent_for(AgentProfile.objects.get(pk=profile.pk), _extension_rows(profile.pk))
    assert after is not before
    assert (after.system_prompt, after.max_iterations) == ("Be thorough.", 9)


@pytest.mark.django_db
def test_an_added_or_disabled_extension_row_gets_a_new_agent() -> None:
    cache = AgentCache()
    profile = _profile()
    plain = cache.agent_for(profile, _extension_rows(profile.pk))
    assert "DemoToolsExtension" not in _names(plain)

    row = ExtensionSetting.objects.create(
        profile=profile, key="demo_tools", settings={"tools": ["calculator"]}, position=0
    )
    with_tools = cache.agent_for(profile, _extension_rows(profile.pk))
    assert "DemoToolsExtension" in _names(with_tools)

    # Only the row changed (the profile's own fields and updated_at did not).
    row.enabled = False
    row.save()
    without = cache.agent_for(profile, _extension_rows(profile.pk))
    assert "DemoToolsExtension" not in _names(without)


@pytest.mark.django_db(transaction=True)
async def test_the_next_run_after_an_admin_adds_tools_uses_them(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile()
    session = await make_session(user, profile)

    first = await manager.submit_message(session.id, user, "What is 2 + 3?")
    await manager.wait_for_run(first.request_id)
    await ExtensionSetting.objects.acreate(
        profile=profile, key="demo_tools", settings={"tools": ["calculator"]}, position=0
    )
    second = await manager.submit_message(session.id, user, "What is 2 + 3?")
    await manager.wait_for_run(second.request_id)

    answers = [
        (m.run.request_id, m.role, m.tool_name)
        async for m in Message.objects.filter(session_id=session.id)
        .exclude(role="user")
        .select_related("run")
        .order_by("seq")
    ]
    assert (first.request_id, "tool", "calculator") not in answers
    assert (second.request_id, "tool", "calculator") in answers
