"""The new-chat and chat pages tell what each agent is for, and start with a chosen one."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agents.models import AgentProfile, ChatSession
from agents.web import rendering

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _selected(page: str) -> str:
    return page.split(" selected>")[0].rsplit('value="', 1)[1].split('"')[0]


def test_a_new_chat_starts_with_the_agent_last_used_else_the_demo_not_the_first_by_name(
    user: Any,
) -> None:
    alpha = AgentProfile.objects.create(
        name="Alpha", slug="alpha", provider="demo", description="Answers in haiku."
    )
    demo = AgentProfile.objects.create(
        name="Zett demo", slug="demo", provider="demo", description="Try tools and steering."
    )
    page = _client(user).get("/").content.decode()
    assert _selected(page) == str(demo.pk)
    assert "Answers in haiku." in page and "Try tools and steering." in page

    ChatSession.objects.create(owner=user, profile=alpha)
    assert _selected(_client(user).get("/").content.decode()) == str(alpha.pk)


def test_the_chat_page_shows_its_agents_description(user: Any) -> None:
    profile = AgentProfile.objects.create(
        name="Helper", slug="helper", provider="demo", description="Summarises <b>long</b> text."
    )
    session = ChatSession.objects.create(owner=user, profile=profile)
    page = _client(user).get(f"/sessions/{session.pk}/").content.decode()
    assert 'data-testid="profile-description">Summarises &lt;b&gt;long&lt;/b&gt; text.' in page


def test_tool_cards_start_collapsed_and_show_a_short_result() -> None:
    call = {"id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}}
    card = rendering.tool_update(call, "completed", {"content": "42"})
    assert '<details class="tool-args">' in card  # arguments folded away
    assert '<details class="tool-result" open>' in card
    long = rendering.tool_update(call, "completed", {"content": "x" * 500})
    assert '<details class="tool-result">' in long  # a long result starts folded too
