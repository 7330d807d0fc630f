"""Budgets in hosted runs: per-run limits, user and profile caps, reservations under races.

Real database, real RunManager, the offline demo model with a price set.
"""

from __future__ import annotations

import asyncio
import datetime
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agents.budgets import next_day, next_month
from agents.models import BudgetCharge, Message, ModelPrice, Run, RunStatus, UserBudget

pytestmark = pytest.mark.django_db(transaction=True)

CAP = Decimal("0.30")


async def _price() -> None:
    # $0.001 an output token: a demo answer of 200 filler words costs about $0.35.
    await ModelPrice.objects.acreate(
        provider="demo",
        model_pattern="demo",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("1000"),
        valid_from=datetime.date.today() - datetime.timedelta(days=1),
    )


async def _budget_profile(make_profile: Any, *, words: int = 200, delay: float = 0.004) -> Any:
    return await make_profile(
        provider_settings={"delay": delay, "reply_words": words},
        extensions=(("budget", {"reserve_output_tokens": 20}),),
    )


async def _finish(manager: Any, user: Any, session: Any, listen_session: Any, text: str) -> Any:
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, text)
    assert reply.accepted, reply.reason
    finished = await listener.finished(reply.request_id)
    return finished, await Run.objects.aget(request_id=reply.request_id)


async def test_a_run_over_its_token_budget_stops_mid_answer_and_keeps_the_partial_answer(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await _budget_profile(make_profile)
    profile.max_tokens_per_run = 150
    await profile.asave()
    session = await make_session(user, profile)

    finished, run = await _finish(manager, user, session, listen_session, "Tell me things")

    assert run.status == RunStatus.BUDGET_EXCEEDED
    assert "the run's token budget (150 tokens) was crossed while the answer streamed" in run.error
    assert finished["run"]["status"] == "budget_exceeded"
    assert finished["notice"]["content"] == run.error  # what the chat shows
    partial = await Message.objects.aget(run=run, role="assistant")
    assert partial.attributes["partial"] is True
    assert partial.attributes["stopped"] == "budget_exceeded"
    assert partial.content.startswith("You said") and "word150" not in partial.content


async def test_a_profile_limit_is_enforced_without_the_extension_configured(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    # The operator sets a limit on the profile and nothing else: the host adds the extension.
    profile = await make_profile(provider_settings={"delay": 0.004, "reply_words": 200})
    assert not await profile.extensions.filter(key="budget").aexists()
    profile.max_tokens_per_run = 150
    await profile.asave()
    session = await make_session(user, profile)

    finished, run = await _finish(manager, user, session, listen_session, "Tell me things")

    assert run.status == RunStatus.BUDGET_EXCEEDED
    assert "the run's token budget (150 tokens)" in run.error
    partial = await Message.objects.aget(run=run, role="assistant")
    assert partial.attributes["stopped"] == "budget_exceeded"


async def test_the_budget_extension_joins_a_run_only_when_a_limit_applies(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    from agents.hosting import starts

    profile = await make_profile(provider_settings={"delay": 0, "reply_words": 30})
    session = await make_session(user, profile)

    def keys(intake: Any) -> list[str]:
        return [row[0] for row in intake.extension_rows]

    free = await starts.create_run(session.id, user.pk, "Hello", "host-a", "alice", None)
    assert "budget" not in keys(free)  # no limit: nothing on the streaming path
    await Run.objects.filter(pk=free.run.pk).aupdate(status=RunStatus.COMPLETED)

    await UserBudget.objects.acreate(user=user, monthly_cost_cap=Decimal("5"))
    capped = await starts.create_run(session.id, user.pk, "Hello", "host-a", "alice", None)
    assert keys(capped).count("budget") == 1


async def test_a_call_that_cannot_fit_the_runs_cost_budget_never_reaches_the_model(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    await _price()
    profile = await _budget_profile(make_profile)
    profile.max_cost_per_run = Decimal("0.000001")
    await profile.asave()
    session = await make_session(user, profile)

    finished, run = await _finish(manager, user, session, listen_session, "Hello")

    assert run.status == RunStatus.BUDGET_EXCEEDED
    assert "the run's cost budget (0.000001 USD) leaves no room for the next model call" in (
        run.error
    )
    assert run.iterations == 0 and run.output_tokens == 0
    assert not await Message.objects.filter(run=run, role="assistant").aexists()


async def test_a_user_over_a_cap_cannot_start_a_run_and_is_told_when_it_resets(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await _budget_profile(make_profile)
    session = await make_session(user, profile)
    await Run.objects.acreate(
        session=session,
        profile=profile,
        started_by=user,
        input_text="earlier",
        status=RunStatus.COMPLETED,
        cost=Decimal("0.5"),
        cost_currency="USD",
    )
    await UserBudget.objects.acreate(user=user, daily_cost_cap=Decimal("0.4"))

    reply = await manager.submit_message(session.id, user, "Hello")

    now = timezone.now()
    assert not reply.accepted
    assert "alice's daily cost cap (0.4) is used up (0.5 spent)" in reply.reason
    assert f"It resets at {next_day(now):%Y-%m-%d} 00:00 UTC." in reply.reason
    assert await Run.objects.filter(session=session).acount() == 1  # nothing started

    # The monthly default from the environment applies too, resetting on the 1st.
    budget = await UserBudget.objects.aget(user=user)
    budget.daily_cost_cap = None
    await budget.asave()
    from django.test import override_settings

    with override_settings(ZETT_USER_MONTHLY_COST_CAP=Decimal("0.2")):
        reply = await manager.submit_message(session.id, user, "Hello")
    assert not reply.accepted and "alice's monthly cost cap (0.2)" in reply.reason
    assert f"It resets at {next_month(now):%Y-%m}-01 00:00 UTC." in reply.reason

    # Raising the budget lets the next run through.
    budget.daily_cost_cap = Decimal("5")
    await budget.asave()
    finished, run = await _finish(manager, user, session, listen_session, "Hello again")
    assert run.status == RunStatus.COMPLETED, run.error


async def test_two_concurrent_runs_of_one_user_overshoot_a_cap_by_at_most_one_call(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    await _price()
    profile = await _budget_profile(make_profile, delay=0.008)  # both stream for a while
    await UserBudget.objects.acreate(user=user, daily_cost_cap=CAP)
    first, second = await make_session(user, profile), await make_session(user, profile)
    listeners = [await listen_session(first.id), await listen_session(second.id)]

    replies = await asyncio.gather(
        manager.submit_message(first.id, user, "Tell me a long story"),
        manager.submit_message(second.id, user, "Tell me another long story"),
    )
    assert all(reply.accepted for reply in replies)
    await asyncio.gather(
        *(
            listener.finished(reply.request_id)
            for listener, reply in zip(listeners, replies, strict=True)
        )
    )

    runs = [await Run.objects.aget(request_id=reply.request_id) for reply in replies]
    charges = await sync_to_async(list)(BudgetCharge.objects.all())
    total = sum((charge.amount for charge in charges), Decimal(0))
    one_call = max(charge.amount for charge in charges)
    assert all(charge.settled for charge in charges)
    # Both streamed at once (each alone would cost about $0.35, more than the cap).
    assert {run.status for run in runs} == {RunStatus.BUDGET_EXCEEDED}
    assert all("alice's daily cost cap (0.3 USD)" in run.error for run in runs)
    assert any("was crossed while the answer streamed" in run.error for run in runs)
    assert CAP <= total <= CAP + one_call
    # Reservations keep the overshoot to a streamed chunk, far below a whole call.
    assert total - CAP < Decimal("0.01")

    # Now over the cap: the next run is refused at its start.
    reply = await manager.submit_message(first.id, user, "More")
    assert not reply.accepted and "alice's daily cost cap" in reply.reason


def test_staff_set_a_users_caps_and_a_profiles_budgets_in_the_admin(
    admin_client: Any, user: Any
) -> None:
    page = admin_client.get("/admin/agents/userbudget/add/").content.decode()
    assert "Daily cost cap" in page and "Monthly cost cap" in page
    response = admin_client.post(
        "/admin/agents/userbudget/add/",
        {"user": user.pk, "daily_cost_cap": "1.5", "monthly_cost_cap": ""},
    )
    assert response.status_code == 302
    budget = UserBudget.objects.get(user=user)
    assert budget.daily_cost_cap == Decimal("1.5") and budget.monthly_cost_cap is None

    page = admin_client.get("/admin/agents/agentprofile/add/").content.decode()
    for label in ("Max tokens per run", "Max cost per run", "Daily cost cap"):
        assert label in page


def test_ordinary_users_cannot_reach_the_budget_admin(client: Any, user: Any) -> None:
    client.force_login(user)
    response = client.get("/admin/agents/userbudget/")
    assert response.status_code == 302 and "/login/" in response["Location"]
