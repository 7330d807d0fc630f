"""The budget extension on the scripted model and on a real provider adapter (loopback).

Refused before a call when the next call cannot fit; stopped mid-stream when the live
estimate crosses a budget, with the provider's stream closed; unlimited without limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from agents.extensions.budget import (
    BudgetExceeded,
    BudgetExtension,
    BudgetGrant,
    BudgetPlan,
    UnlimitedLedger,
)
from agents.providers.scripted import ScriptedModel
from agents.runtime import Agent, AgentRunConfig, ModelUsage
from agents.runtime.pricing import TokenPrices
from tests.extensions.conftest import StreamedRun
from tests.providers.adapters import OPENAI
from tests.providers.loopback import FakeServer, Reply


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


PRICES = TokenPrices(input=Decimal("1"), output=Decimal("1000"))  # per million tokens


class CappedLedger:
    """A host ledger with one shared cap, reservations and settlements kept in memory."""

    def __init__(self, plan: BudgetPlan, cap: Decimal) -> None:
        self._plan = plan
        self.cap = cap
        self.charges: dict[str, Decimal] = {}
        self.settled: dict[str, Decimal] = {}

    async def plan(self, session_id: str, request_id: str) -> BudgetPlan:
        return self._plan

    async def reserve(
        self, request_id: str, call_id: str, minimum: Decimal, wanted: Decimal
    ) -> BudgetGrant:
        spent = sum(self.charges.values(), Decimal(0))
        left = self.cap - spent
        if left < minimum:
            refusal = BudgetExceeded(
                "the test cap", limit=self.cap, used=spent, needed=minimum, unit="USD"
            )
            return BudgetGrant(refusal=refusal)
        grant = min(wanted, left)
        self.charges[call_id] = self.charges.get(call_id, Decimal(0)) + grant
        return BudgetGrant(grant)

    async def settle(self, request_id: str, call_id: str, amount: Decimal) -> None:
        self.charges[call_id] = amount
        self.settled[call_id] = amount


def _config(n: int = 1) -> AgentRunConfig:
    return AgentRunConfig(session_id=f"budget-{n}", request_id=f"budget-request-{n}")


async def _fails(run: StreamedRun) -> BaseException:
    with pytest.raises(BudgetExceeded) as caught:
        await run.result()
    return caught.value


async def test_a_call_that_cannot_fit_the_runs_token_budget_is_refused_before_the_model(
    start_run: Any,
) -> None:
    model = ScriptedModel(["never said"])
    extension = BudgetExtension(ledger=UnlimitedLedger(BudgetPlan(max_tokens=20)))
    agent = Agent(model, extensions=[extension])

    run = start_run(agent, "x" * 200, config=_config())
    error = await _fails(run)

    assert model.calls == 0
    assert "the run's token budget (20 tokens)" in str(error)
    assert "over by" in str(error)


async def test_the_second_call_is_refused_once_the_first_used_the_budget(
    start_run: Any,
) -> None:
    from agents.providers.scripted import tool_call
    from agents.runtime import AssistantMessage, tool

    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("noop"),)), "done"],
        usage=ModelUsage(input_tokens=400, output_tokens=100),
    )
    extension = BudgetExtension(ledger=UnlimitedLedger(BudgetPlan(max_tokens=450)))
    agent = Agent(model, tools=[noop], extensions=[extension])

    error = await _fails(start_run(agent, "go", config=_config()))

    assert model.calls == 1
    assert error.used == 500 and error.limit == 450  # type: ignore[attr-defined]


async def test_the_shared_cap_refuses_a_call_and_settles_what_each_call_cost(
    start_run: Any,
) -> None:
    usage = ModelUsage(input_tokens=1000, output_tokens=100)  # 0.001 + 0.1 = 0.101
    model = ScriptedModel(["first answer"], usage=usage, repeat_last=True)
    ledger = CappedLedger(BudgetPlan(prices=PRICES), cap=Decimal("0.15"))
    agent = Agent(model, extensions=[BudgetExtension(ledger=ledger, reserve_output_tokens=10)])

    answer = await start_run(agent, "hello", config=_config(1)).result()
    assert answer.content == "first answer"
    assert list(ledger.settled.values()) == [PRICES.cost(usage)]

    # 0.049 left: the next call fits its reservation; its real usage overshoots by one call.
    await start_run(agent, "again", config=_config(2)).result()
    assert sum(ledger.charges.values()) == 2 * PRICES.cost(usage)

    error = await _fails(start_run(agent, "third", config=_config(3)))
    assert model.calls == 2
    assert "the test cap" in str(error)


async def test_a_stream_crossing_the_runs_cost_budget_is_stopped_and_settled_at_the_estimate(
    start_run: Any,
) -> None:
    words = " ".join(f"word{i}" for i in range(400))
    model = ScriptedModel([words], delay=0.001)
    plan = BudgetPlan(prices=PRICES, max_cost=Decimal("0.05"))  # about 50 output tokens
    ledger = CappedLedger(plan, cap=Decimal("10"))
    agent = Agent(model, extensions=[BudgetExtension(ledger=ledger, reserve_output_tokens=8)])

    run = start_run(agent, "talk", config=_config())
    error = await _fails(run)

    assert error.mid_stream  # type: ignore[attr-defined]
    assert "the run's cost budget (0.05 USD) was crossed while the answer streamed" in str(error)
    streamed = "".join(event.delta for event in run.events if event.type.name == "TEXT_DELTA")
    assert 0 < len(streamed) < len(words) // 4
    # The call was settled at its live estimate, which is just over the run's budget.
    (settled,) = ledger.settled.values()
    assert Decimal("0.05") < settled < Decimal("0.06")


async def test_the_provider_stream_is_closed_when_a_budget_stops_it(
    start_run: Any, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OPENAI.key_env, OPENAI.key)
    fake_server.script(
        Reply(
            events=OPENAI.opening("Once"),
            end="repeat",
            repeat=OPENAI.more_text(" upon a time there was"),
            every=0.01,
        )
    )
    model = OPENAI.model(fake_server)
    extension = BudgetExtension(ledger=UnlimitedLedger(BudgetPlan(max_tokens=80)))
    agent = Agent(model, extensions=[extension])

    run = start_run(agent, "Tell a story", config=_config())
    error = await _fails(run)

    assert error.mid_stream and "the run's token budget (80 tokens)" in str(error)  # type: ignore[attr-defined]
    assert await asyncio.to_thread(fake_server.client_disconnected.wait, 5)
    assert 3 <= fake_server.repeats_sent < 100


async def test_without_limits_the_run_completes(start_run: Any) -> None:
    model = ScriptedModel(["fine"])
    agent = Agent(model, extensions=[BudgetExtension()])
    assert (await start_run(agent, "hi", config=_config()).result()).content == "fine"
