"""A hosted run's cost: from the price in force when it started, exact, or "no price set"."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from agents.admin import models_without_price
from agents.hosting.payloads import usage_dict
from agents.models import ModelPrice, Run

pytestmark = pytest.mark.django_db(transaction=True)


async def _run(manager: Any, user: Any, session: Any, listen_session: Any) -> Run:
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, "Hello there, how are you?")
    finished = await listener.finished(reply.request_id)
    assert finished["run"]["usage"]["estimated"] is False
    return await Run.objects.aget(request_id=reply.request_id)


async def test_a_priced_run_costs_its_usage_under_the_price_in_force(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile()
    today = datetime.date.today()
    await ModelPrice.objects.acreate(
        provider="demo",
        model_pattern="de*",
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        valid_from=today,
    )
    await ModelPrice.objects.acreate(
        provider="demo",
        model_pattern="demo",
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
        valid_from=today - datetime.timedelta(days=3),
    )
    # A newer price from tomorrow on is not in force for a run started today.
    await ModelPrice.objects.acreate(
        provider="demo",
        model_pattern="demo",
        input_per_million=Decimal("100"),
        output_per_million=Decimal("100"),
        valid_from=today + datetime.timedelta(days=1),
    )
    run = await _run(manager, user, await make_session(user, profile), listen_session)

    assert run.input_tokens > 0 and run.output_tokens > 0
    expected = (Decimal(run.input_tokens) * 3 + Decimal(run.output_tokens) * 15) / 1_000_000
    assert run.cost == expected and run.cost_currency == "USD"
    assert usage_dict(run)["cost"] == f"{expected.normalize():f}"
    assert "tokens · $" in usage_dict(run)["label"]


async def test_an_unpriced_run_shows_tokens_and_no_price_and_the_admin_lists_it(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile()
    run = await _run(manager, user, await make_session(user, profile), listen_session)

    assert run.cost is None and run.input_tokens + run.output_tokens > 0
    assert usage_dict(run)["label"].endswith("tokens · no price set")
    from asgiref.sync import sync_to_async

    assert await sync_to_async(models_without_price)() == [("demo", "demo")]


def test_the_price_admin_names_models_seen_without_a_price(admin_client: Client, user: Any) -> None:
    from agents.models import AgentProfile, ChatSession

    profile = AgentProfile.objects.create(name="P", slug="p", provider="openai", model_name="gpt-x")
    session = ChatSession.objects.create(owner=user, profile=profile)
    Run.objects.create(session=session, profile=profile, input_text="hi", input_tokens=5)

    page = admin_client.get("/admin/agents/modelprice/").content.decode()
    assert "Models seen without a price" in page and "openai:gpt-x" in page


def test_the_chat_header_shows_the_sessions_total_of_its_runs(client: Client, user: Any) -> None:
    from agents.models import AgentProfile, ChatSession

    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo", model_name="demo")
    session = ChatSession.objects.create(owner=user, profile=profile)
    for cost in ("0.0012", "0.0030"):
        Run.objects.create(
            session=session,
            profile=profile,
            input_text="hi",
            status="completed",
            input_tokens=1000,
            output_tokens=200,
            cost=Decimal(cost),
            cost_currency="USD",
        )
    client.force_login(user)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert "2,400 tokens · $0.0042" in page
