"""The quiet line under each finished answer: its run's tokens and cost, on a reloaded page."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from agents.hosting import session_transcript
from agents.models import AgentProfile, ChatSession, Message, Run, RunStatus

pytestmark = pytest.mark.django_db

LINE = re.compile(r'data-testid="answer-usage" data-request-id="([^"]+)">.*?</span>([^<]*)</p>')


@pytest.fixture
def chat(user: Any) -> dict[str, Any]:
    """A chat with a priced completed run, an unpriced completed one and a failed one."""
    profile = AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")
    session = ChatSession.objects.create(owner=user, profile=profile)
    runs = {}
    specs = [
        ("priced", RunStatus.COMPLETED, (1200, 34), Decimal("0.01234"), "USD"),
        ("unpriced", RunStatus.COMPLETED, (10, 5), None, ""),
        ("failed", RunStatus.FAILED, (7, 0), None, ""),
    ]
    for index, (name, status, tokens, cost, currency) in enumerate(specs):
        run = Run.objects.create(
            session=session, profile=profile, started_by=user, input_text=name, status=status,
            input_tokens=tokens[0], output_tokens=tokens[1], cost=cost, cost_currency=currency,
            error="Model broke." if status == RunStatus.FAILED else "",
        )  # fmt: skip
        for offset, role in enumerate(("user", "assistant")):
            Message.objects.create(
                session=session, run=run, seq=index * 2 + offset + 1, role=role,
                message_id=f"{name}-{role}", content=f"{name} {role}",
            )  # fmt: skip
        runs[name] = run
    return {"session": session, "runs": runs}


def test_each_completed_runs_answer_carries_its_usage_and_a_failed_one_a_notice(
    chat: dict[str, Any],
) -> None:
    items = session_transcript(chat["session"].pk)
    assert [(m["role"], m.get("usage")) for m in items] == [
        ("user", None),
        ("assistant", "1,234 tokens · $0.0123"),
        ("user", None),
        ("assistant", "15 tokens · no price set"),
        ("user", None),
        ("assistant", None),
        ("notice", None),
    ]


def test_the_chat_page_shows_the_line_under_each_completed_answer(
    client: Client, user: Any, chat: dict[str, Any]
) -> None:
    client.force_login(user)
    page = client.get(f"/sessions/{chat['session'].pk}/").content.decode()
    runs = chat["runs"]
    assert [match.groups() for match in LINE.finditer(page)] == [
        (runs["priced"].request_id, "1,234 tokens · $0.0123"),
        (runs["unpriced"].request_id, "15 tokens · no price set"),
    ]
    # Each line sits between its answer and the next message.
    order = [page.index(marker) for marker in (
        'data-message-id="priced-assistant"', runs["priced"].request_id,
        'data-message-id="unpriced-user"', runs["unpriced"].request_id,
        'data-message-id="failed-user"',
    )]  # fmt: skip
    assert order == sorted(order)
