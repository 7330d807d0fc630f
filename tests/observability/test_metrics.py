"""/metrics: this process's Prometheus text, for staff or a bearer token, before and after runs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient, override_settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agents.observability.metrics import PROCESS

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})


async def _scrape(client: AsyncClient, **headers: str) -> list[Sample]:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(response.content.decode())
    return [sample for family in families for sample in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def test_metrics_are_refused_to_anonymous_users_non_staff_and_wrong_tokens(
    user: Any,
) -> None:
    client = AsyncClient()
    anonymous = await client.get("/metrics")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert b"zett_" not in anonymous.content

    with override_settings(ZETT_METRICS_TOKEN="s3cret"):
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
    # No token configured: no bearer token opens it, not even an empty one.
    assert (
        await client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    ).status_code == 401

    await client.aforce_login(user)
    assert (await client.get("/metrics")).status_code == 403


async def test_a_scraper_with_the_bearer_token_reads_metrics() -> None:
    with override_settings(ZETT_METRICS_TOKEN="s3cret"):
        samples = await _scrape(AsyncClient(), Authorization="Bearer s3cret")
    assert samples and all(s.labels.get("process") == PROCESS for s in samples)


async def test_runs_move_the_run_token_model_and_tool_metrics(
    manager: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    profile = await make_profile(extensions=(DEMO_TOOLS,), slug="calc")
    before = await _scrape(client)

    for text in ("What is 6 * 7?", "Hello there"):
        session = await make_session(staff_user, profile)
        listener = await listen_session(session.id)
        reply = await manager.submit_message(session.id, staff_user, text)
        assert reply.accepted
        finished = await listener.finished(reply.request_id)
        assert finished["run"]["status"] == "completed"
    await manager.wait_idle()
    after = await _scrape(client)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    name = profile.name
    assert delta("zett_runs_started_total", profile=name) == 2
    assert delta("zett_runs_finished_total", profile=name, outcome="completed") == 2
    assert delta("zett_runs_finished_total", profile=name, outcome="failed") == 0
    assert delta("zett_run_duration_seconds_count", profile=name, outcome="completed") == 2
    # The calculator run made two model calls (the tool call, then the answer).
    assert delta("zett_model_call_duration_seconds_count", profile=name) == 3
    assert delta("zett_time_to_first_token_seconds_count", profile=name) == 3
    assert (
        delta("zett_tool_call_duration_seconds_count", tool="calculator", status="completed") == 1
    )
    assert delta("zett_tokens_total", profile=name, kind="input") > 0
    assert delta("zett_tokens_total", profile=name, kind="output") > 0
    # Nothing hosted any more: no active runs of any status.
    assert _value(after, "zett_runs_active") == 0
    assert all(s.labels.get("process") == PROCESS for s in after)


async def test_a_run_waiting_for_approval_is_active_until_an_operator_approves_it(
    manager: Any,
    staff_user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    gate = ("tool_approval", {"tools": ["calculator"]})
    profile = await make_profile(extensions=(DEMO_TOOLS, gate), slug="gated")
    session = await make_session(staff_user, profile)
    listener = await listen_session(session.id)
    before = await _scrape(client)
    reply = await manager.submit_message(session.id, staff_user, "What is 12 * 12?")
    requested = await listener.until(
        lambda f: f["type"] == "run.custom" and f["name"] == "approval.requested"
    )
    await listener.until(lambda f: f["type"] == "run.tool" and f["status"] == "started")

    waiting = await _scrape(client)
    assert _value(waiting, "zett_runs_active", status="waiting", phase="running_tool") == 1
    assert _value(waiting, "zett_runs_active") == 1

    approved = await manager.control(
        session.id, staff_user, "approve", {"id": requested["data"]["id"]}
    )
    assert approved.accepted
    await listener.finished(reply.request_id)
    await manager.wait_idle()
    after = await _scrape(client)
    assert _value(after, "zett_runs_active") == 0
    accepted = {"action": "approve", "accepted": "true"}
    assert (
        _value(after, "zett_operator_actions_total", **accepted)
        - _value(before, "zett_operator_actions_total", **accepted)
        == 1
    )
