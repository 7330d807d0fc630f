"""zett_cost_total{profile,currency}: each hosted run's settled cost, added when the run ends."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from agents.models import ModelPrice, Run

pytestmark = pytest.mark.django_db(transaction=True)


async def _cost_samples(client: AsyncClient) -> dict[tuple[str, str], float]:
    response = await client.get("/metrics")
    assert response.status_code == 200
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "zett_cost_total":
                key = (sample.labels["profile"], sample.labels["currency"])
                found[key] = found.get(key, 0.0) + sample.value
    return found


async def _run(manager: Any, user: Any, session: Any, listen_session: Any, text: str) -> Run:
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, text)
    assert reply.accepted, reply.reason
    finished = await listener.finished(reply.request_id)
    assert finished["run"]["status"] == "completed"
    return await Run.objects.aget(request_id=reply.request_id)


async def test_each_priced_run_adds_its_cost_under_its_profile_and_currency(
    manager: Any, staff_user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    await ModelPrice.objects.acreate(
        provider="demo",
        model_pattern="demo",
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
        currency="EUR",
        valid_from=datetime.date.today() - datetime.timedelta(days=1),
    )
    priced = await make_profile(slug="priced-metric")
    before = await _cost_samples(client)

    runs = [
        await _run(manager, staff_user, await make_session(staff_user, priced), listen_session, t)
        for t in ("Hello there", "Tell me something longer, please, about the sea")
    ]

    after = await _cost_samples(client)
    total = sum((run.cost for run in runs if run.cost is not None), Decimal(0))
    assert total > 0 and all(run.cost_currency == "EUR" for run in runs)
    key = ("Priced Metric", "EUR")
    assert after[key] - before.get(key, 0.0) == pytest.approx(float(total), rel=1e-9)
    assert ("Priced Metric", "USD") not in after


async def test_an_unpriced_run_adds_no_cost(
    manager: Any, staff_user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    unpriced = await make_profile(slug="unpriced-metric")

    run = await _run(
        manager, staff_user, await make_session(staff_user, unpriced), listen_session, "Hi"
    )

    assert run.cost is None
    assert not [key for key in await _cost_samples(client) if key[0] == "Unpriced Metric"]
