"""The pages: who reaches them, what they show, and starting a new chat."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import (
    AgentProfile,
    ChatSession,
    Message,
    OperatorAction,
    Run,
    RunEvent,
    RunStatus,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile() -> AgentProfile:
    return AgentProfile.objects.create(name="Helper", slug="helper", provider="demo")


@pytest.fixture
def session(user: Any, profile: AgentProfile) -> ChatSession:
    return ChatSession.objects.create(owner=user, profile=profile, title="Alice's chat")


@pytest.fixture
def finished_run(session: ChatSession, user: Any) -> Run:
    start = timezone.now() - dt.timedelta(seconds=5)
    run = Run.objects.create(
        session=session, profile=session.profile, started_by=user, input_text="2+3?",
        status=RunStatus.COMPLETED, phase="completed", iterations=2, input_tokens=12,
        output_tokens=7, started_at=start, finished_at=start + dt.timedelta(seconds=2),
    )  # fmt: skip
    events = [
        (1, "run_started", 0, 0, {}),
        (2, "model_started", 1, 0, {}),
        (3, "text_delta", 1, 100, {"kind": "text", "text": "Let me use it.", "count": 4}),
        (7, "model_completed", 1, 300, {"usage": {"input": 6, "output": 4},
                                        "tool_calls": ["calculator"]}),
        (8, "tool_started", 1, 310, {"tool": "calculator", "call_id": "c1",
                                     "arguments": {"expression": "2+3"}}),
        (9, "tool_completed", 1, 350, {"tool": "calculator", "call_id": "c1",
                                       "status": "completed", "duration_ms": 40.0}),
        (10, "model_started", 2, 360, {}),
        (11, "model_completed", 2, 500, {"usage": {"input": 6, "output": 3}}),
        (12, "run_completed", 2, 510, {}),
    ]  # fmt: skip
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=seq, last_seq=seq + (3 if kind == "text_delta" else 0), type=kind,
                 phase="generating", iteration=iteration, at=start + dt.timedelta(milliseconds=ms),
                 data=data)
        for seq, kind, iteration, ms, data in events
    )  # fmt: skip
    return run


def _login(client: Client, who: Any) -> Client:
    client.force_login(who)
    return client


@pytest.mark.parametrize("path", ["/", "/sessions/x/", "/monitor/", "/runs/x/"])
def test_every_page_sends_anonymous_visitors_to_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_home_lists_only_my_sessions_with_profile_and_status(
    client: Client, session: ChatSession, other_user: Any, profile: AgentProfile
) -> None:
    ChatSession.objects.create(owner=other_user, profile=profile, title="Bob's secret")
    page = _login(client, session.owner).get("/").content.decode()
    assert "Alice&#x27;s chat" in page
    assert f'href="/sessions/{session.pk}/"' in page
    assert "Helper" in page and "Idle" in page
    assert "Bob" not in page


def test_new_chat_form_offers_only_active_profiles(client: Client, user: Any) -> None:
    AgentProfile.objects.create(name="Active one", slug="a", provider="demo")
    AgentProfile.objects.create(name="Retired one", slug="r", provider="demo", is_active=False)
    page = _login(client, user).get("/").content.decode()
    assert "Active one" in page
    assert "Retired one" not in page


def test_posting_the_new_chat_form_creates_my_session_and_opens_it(
    client: Client, user: Any, profile: AgentProfile
) -> None:
    response = _login(client, user).post("/sessions/new/", {"profile": profile.pk, "title": ""})
    created = ChatSession.objects.get()
    assert (created.owner, created.profile) == (user, profile)
    assert response.status_code == 302
    assert response["Location"] == f"/sessions/{created.pk}/"


def test_new_chat_with_an_inactive_profile_is_refused(client: Client, user: Any) -> None:
    retired = AgentProfile.objects.create(name="Old", slug="old", provider="demo", is_active=False)
    response = _login(client, user).post("/sessions/new/", {"profile": retired.pk})
    assert response.status_code == 400
    assert not ChatSession.objects.exists()


def test_new_chat_needs_post_and_csrf(user: Any, profile: AgentProfile) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/sessions/new/").status_code == 405
    assert client.post("/sessions/new/", {"profile": profile.pk}).status_code == 403
    assert not ChatSession.objects.exists()


def test_owner_sees_the_chat_with_transcript_and_socket(
    client: Client, session: ChatSession
) -> None:
    Message.objects.create(session=session, seq=1, message_id="m1", role="user", content="Hi?")
    Message.objects.create(
        session=session,
        seq=2,
        message_id="m2",
        role="assistant",
        content="**Hello** <script>x()</script>",
    )
    response = _login(client, session.owner).get(f"/sessions/{session.pk}/")
    page = response.content.decode()
    assert response.status_code == 200
    assert f'ws-connect="/ws/sessions/{session.pk}/"' in page
    assert "<strong>Hello</strong>" in page
    assert "<script>x()" not in page and "&lt;script&gt;x()" in page
    assert 'name="type" value="message"' in page


def test_another_user_gets_404_for_my_session_as_for_a_missing_one(
    client: Client, session: ChatSession, other_user: Any
) -> None:
    _login(client, other_user)
    assert client.get(f"/sessions/{session.pk}/").status_code == 404
    assert client.get("/sessions/does-not-exist/").status_code == 404


def test_staff_may_open_any_users_chat(
    client: Client, session: ChatSession, staff_user: Any
) -> None:
    page = _login(client, staff_user).get(f"/sessions/{session.pk}/")
    assert page.status_code == 200
    assert "alice's session" in page.content.decode()


def test_chat_of_an_active_run_shows_phase_cancel_steer_and_waits(
    client: Client, session: ChatSession
) -> None:
    Run.objects.create(
        session=session, input_text="x", status=RunStatus.WAITING, phase="running_tool",
        started_at=timezone.now(), waiting_for=[
            {"kind": "approval", "id": "c9", "tool": "shell", "arguments": {"cmd": "ls"}},
            {"kind": "question", "id": "q1", "question": "Which <b>file</b>?", "choices": ["a"]},
        ],
    )  # fmt: skip
    page = _login(client, session.owner).get(f"/sessions/{session.pk}/").content.decode()
    assert 'data-testid="phase">using a tool<' in page
    assert 'name="type" value="cancel"' in page
    assert 'data-testid="steer-hint"' in page
    assert 'data-testid="approval-card" data-wait-id="c9"' in page
    assert 'name="type" value="approve"' in page and 'name="type" value="deny"' in page
    assert "Which &lt;b&gt;file&lt;/b&gt;?" in page
    assert 'name="type" value="answer"' in page


def test_monitor_is_staff_only(client: Client, user: Any) -> None:
    assert _login(client, user).get("/monitor/").status_code == 403


def test_monitor_shows_active_runs_and_recently_finished_ones(
    client: Client, staff_user: Any, session: ChatSession, finished_run: Run
) -> None:
    active = Run.objects.create(
        session=session, input_text="go", status=RunStatus.RUNNING, phase="generating",
        current_tool="clock", iterations=3, started_at=timezone.now(),
    )  # fmt: skip
    response = _login(client, staff_user).get("/monitor/")
    page = response.content.decode()
    assert response.status_code == 200
    assert 'ws-connect="/ws/monitor/"' in page
    active_table = page.split('<tbody id="active-runs"')[1].split("</tbody>")[0]
    recent_table = page.split('<tbody id="recent-runs"')[1].split("</tbody>")[0]
    assert f'id="run-{active.request_id}"' in active_table
    assert "<code>clock</code>" in active_table and "alice" in active_table
    assert f'id="run-{finished_run.request_id}"' in recent_table
    assert f'href="/sessions/{session.pk}/"' in active_table


def test_run_page_shows_timeline_with_durations_and_operator_actions(
    client: Client, finished_run: Run, staff_user: Any
) -> None:
    OperatorAction.objects.create(
        session=finished_run.session, run=finished_run, user=staff_user, action="approve",
        payload={"id": "c1"}, outcome="accepted",
    )  # fmt: skip
    response = _login(client, finished_run.session.owner).get(f"/runs/{finished_run.request_id}/")
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count('data-testid="turn"') == 3  # start, turn 1, turn 2
    assert 'data-kind="model"' in page and 'data-kind="tool"' in page
    assert "calculator" in page and "40.0 ms" in page  # the tool's recorded duration
    assert "300.0 ms" in page  # model call 1 ran from +0 ms to +300 ms
    assert "Let me use it." in page
    actions = page.split('data-testid="operator-actions"')[1]
    assert "operator" in actions and "approve" in actions and "accepted" in actions


def test_run_page_is_404_for_other_users_and_open_to_staff(
    client: Client, finished_run: Run, other_user: Any, staff_user: Any
) -> None:
    assert _login(client, other_user).get(f"/runs/{finished_run.request_id}/").status_code == 404
    assert _login(client, staff_user).get(f"/runs/{finished_run.request_id}/").status_code == 200
    assert client.get("/runs/nope/").status_code == 404
