"""BudgetExtension: a run stops when its next model call cannot fit a budget, or mid-stream.

The host gives the numbers through a ``BudgetLedger`` (this module imports no Django):

- ``plan(session_id, request_id)`` once per request: the model's prices and the run's own
  limits (max tokens, max cost per run);
- ``reserve(request_id, call_id, minimum, wanted)`` before a call and whenever a streaming
  call's live estimate reaches what it reserved: the ledger checks the shared caps (per user
  per day and month, per profile per day) atomically and grants up to ``wanted`` of what
  is left, or refuses when not even ``minimum`` is left;
- ``settle(request_id, call_id, amount)`` once the call's cost is known (its usage, or the
  live estimate when it was stopped or failed).

Reserving before spending is what keeps two runs of one user from both spending the last
part of a cap: each call may only spend what it was granted, so together they overshoot a
cap by no more than the estimation error of one call.

Refusals raise ``BudgetExceeded``, which names the budget and by how much it would be
exceeded; the host ends such a run as ``budget_exceeded`` and keeps its partial answer.
Without prices only token limits apply.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..runtime.extension import AgentExtension, ModelCallNext
from ..runtime.model import ModelEvent, ModelRequest
from ..runtime.pricing import TokenPrices, tokens_of_chars
from .summary_compaction import estimate_tokens

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext

_STATE_KEY = "zett.budget"


class BudgetSettings(BaseModel):
    """How much output a call reserves ahead, and the least a call must be able to produce."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reserve_output_tokens: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description=(
            "Output tokens reserved against the cost caps before a call starts, and again "
            "each time a streaming answer's live estimate uses up what was reserved."
        ),
    )
    min_output_tokens: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="A call is refused unless the budgets leave room for this much output.",
    )


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    """What the host says about one run before its first model call."""

    prices: TokenPrices | None = None  # None: no price set, so only token limits apply
    max_tokens: int | None = None  # the run's token budget (input + output of all calls)
    max_cost: Decimal | None = None  # the run's cost budget

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 0:
            raise ValueError("max_tokens cannot be negative")
        if self.max_cost is not None and (
            not isinstance(self.max_cost, Decimal) or self.max_cost < 0
        ):
            raise ValueError("max_cost is a non-negative Decimal")


@dataclass(frozen=True, slots=True)
class BudgetGrant:
    """A ledger's answer to a reservation: how much was granted, or why nothing was."""

    amount: Decimal = Decimal(0)  # granted now, on top of what the call already holds
    refusal: BudgetExceeded | None = None  # set when not even the minimum was left


class BudgetExceeded(Exception):
    """A budget does not allow the next call, or a streaming call crossed it.

    ``budget`` names it ("the run's token budget", "alice's daily cost cap"), ``limit`` is
    its size, ``used`` what was already spent and ``needed`` what the call needs (or has
    reached, mid-stream); ``over`` is by how much the budget would be exceeded.
    """

    def __init__(
        self,
        budget: str,
        *,
        limit: Decimal | int,
        used: Decimal | int,
        needed: Decimal | int,
        unit: str = "",
        mid_stream: bool = False,
        resets: str = "",
    ) -> None:
        self.budget = budget
        self.limit = limit
        self.used = used
        self.needed = needed
        self.unit = unit
        self.mid_stream = mid_stream
        self.resets = resets
        super().__init__(self.describe())

    @property
    def over(self) -> Decimal | int:
        return self.used + self.needed - self.limit

    def describe(self) -> str:
        unit = self.unit

        def show(value: Decimal | int) -> str:
            if isinstance(value, Decimal):
                return f"{value.quantize(Decimal('0.000001')).normalize():f} {unit}".strip()
            return f"{value:,} {unit}".strip()

        if self.mid_stream:
            text = (
                f"Budget exceeded: {self.budget} ({show(self.limit)}) was crossed while the "
                f"answer streamed; already used {show(self.used)}, this call reached about "
                f"{show(self.needed)}, over by {show(self.over)}. The answer was stopped."
            )
        else:
            text = (
                f"Budget exceeded: {self.budget} ({show(self.limit)}) leaves no room for the "
                f"next model call; already used {show(self.used)}, the call needs about "
                f"{show(self.needed)}, over by {show(self.over)}."
            )
        if self.resets:
            text += f" It resets {self.resets}."
        return text


class BudgetLedger(Protocol):
    """What the host provides: limits, prices, and the shared caps' reservations."""

    async def plan(self, session_id: str, request_id: str) -> BudgetPlan: ...

    async def reserve(
        self, request_id: str, call_id: str, minimum: Decimal, wanted: Decimal
    ) -> BudgetGrant: ...

    async def settle(self, request_id: str, call_id: str, amount: Decimal) -> None: ...


class UnlimitedLedger:
    """No limits and no caps: what an extension without a host ledger uses."""

    def __init__(self, plan: BudgetPlan | None = None) -> None:
        self._plan = plan or BudgetPlan()

    async def plan(self, session_id: str, request_id: str) -> BudgetPlan:
        return self._plan

    async def reserve(
        self, request_id: str, call_id: str, minimum: Decimal, wanted: Decimal
    ) -> BudgetGrant:
        return BudgetGrant(wanted)

    async def settle(self, request_id: str, call_id: str, amount: Decimal) -> None:
        return None


@dataclass(slots=True)
class _RunBudget:
    """Per-request bookkeeping, kept in context.metadata."""

    plan: BudgetPlan
    cost: Decimal = Decimal(0)  # settled cost of this run's calls so far
    calls: int = 0
    call: _Call | None = None  # the call between before_model and its end


@dataclass(slots=True)
class _Call:
    call_id: str
    input_tokens: int  # estimated prompt size
    input_cost: Decimal
    reserved: Decimal = Decimal(0)  # granted by the ledger so far
    output_chars: int = 0
    settled: bool = False


class BudgetExtension(AgentExtension):
    """Refuses a model call that cannot fit, and stops a stream that crosses a budget."""

    priority = 20  # outside most model-request layers: it sees what the provider sends

    def __init__(
        self,
        settings: BudgetSettings | None = None,
        *,
        ledger: BudgetLedger | None = None,
        **options: Any,
    ) -> None:
        self.settings = settings or BudgetSettings(**options)
        self.ledger: BudgetLedger = ledger if ledger is not None else UnlimitedLedger()

    async def _state(self, context: AgentRunContext) -> _RunBudget:
        state = context.metadata.get(_STATE_KEY)
        if state is None:
            plan = await self.ledger.plan(context.session_id, context.request_id)
            state = context.metadata[_STATE_KEY] = _RunBudget(plan)
        return state

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        """Refuse the call (BudgetExceeded) when a budget cannot fit it; else reserve it."""
        budget = await self._state(context)
        plan = budget.plan
        prices = plan.prices
        minimum_out = self.settings.min_output_tokens
        input_tokens = estimate_tokens(list(request.messages))
        used_tokens = context.state.usage.total_tokens
        if plan.max_tokens is not None and used_tokens + input_tokens + minimum_out > (
            plan.max_tokens
        ):
            raise BudgetExceeded(
                "the run's token budget",
                limit=plan.max_tokens,
                used=used_tokens,
                needed=input_tokens + minimum_out,
                unit="tokens",
            )
        budget.calls += 1
        call_id = f"{context.request_id}:{budget.calls}"
        if prices is None:
            budget.call = _Call(call_id, input_tokens, Decimal(0))
            return
        input_cost = input_tokens * prices.input / Decimal(1_000_000)
        minimum = input_cost + prices.output_cost(minimum_out)
        wanted = input_cost + prices.output_cost(self.settings.reserve_output_tokens)
        if plan.max_cost is not None:
            left = plan.max_cost - budget.cost
            if left < minimum:
                raise BudgetExceeded(
                    "the run's cost budget",
                    limit=plan.max_cost,
                    used=budget.cost,
                    needed=minimum,
                    unit=prices.currency,
                )
            wanted = min(wanted, left)
        grant = await self.ledger.reserve(context.request_id, call_id, minimum, wanted)
        if grant.refusal is not None:
            raise grant.refusal
        budget.call = _Call(call_id, input_tokens, input_cost, reserved=grant.amount)

    def on_model_request(
        self, context: AgentRunContext, request: ModelRequest, call_next: ModelCallNext
    ) -> AsyncIterator[ModelEvent]:
        return self._metered(context, request, call_next)

    async def _metered(
        self, context: AgentRunContext, request: ModelRequest, call_next: ModelCallNext
    ) -> AsyncIterator[ModelEvent]:
        budget = await self._state(context)
        call = budget.call
        inner = call_next(request)
        try:
            async for event in inner:
                if call is not None and event.kind in ("text", "reasoning", "tool_call"):
                    call.output_chars += len(event.delta)
                    await self._check_live(context, budget, call)
                elif call is not None and event.kind == "completed" and event.response:
                    usage = event.response.usage
                    prices = budget.plan.prices
                    if prices is not None and usage.total_tokens > 0:
                        await self._settle(context, budget, call, prices.cost(usage))
                    else:
                        await self._settle(context, budget, call, self._live_cost(budget, call))
                yield event
        finally:
            try:
                if call is not None and not call.settled:
                    # Stopped, failed or cancelled: the provider still charged what it sent.
                    await asyncio.shield(
                        self._settle(context, budget, call, self._live_cost(budget, call))
                    )
            finally:
                aclose = getattr(inner, "aclose", None)
                if aclose is not None:
                    await aclose()

    def _live_cost(self, budget: _RunBudget, call: _Call) -> Decimal:
        prices = budget.plan.prices
        if prices is None:
            return Decimal(0)
        return call.input_cost + prices.output_cost(tokens_of_chars(call.output_chars))

    async def _check_live(self, context: AgentRunContext, budget: _RunBudget, call: _Call) -> None:
        plan = budget.plan
        output_tokens = tokens_of_chars(call.output_chars)
        used_tokens = context.state.usage.total_tokens
        if plan.max_tokens is not None and used_tokens + call.input_tokens + output_tokens > (
            plan.max_tokens
        ):
            raise BudgetExceeded(
                "the run's token budget",
                limit=plan.max_tokens,
                used=used_tokens,
                needed=call.input_tokens + output_tokens,
                unit="tokens",
                mid_stream=True,
            )
        prices = plan.prices
        if prices is None:
            return
        live = self._live_cost(budget, call)
        if live <= call.reserved:
            return
        if plan.max_cost is not None and budget.cost + live > plan.max_cost:
            raise BudgetExceeded(
                "the run's cost budget",
                limit=plan.max_cost,
                used=budget.cost,
                needed=live,
                unit=prices.currency,
                mid_stream=True,
            )
        wanted = prices.output_cost(self.settings.reserve_output_tokens)
        if plan.max_cost is not None:
            wanted = min(wanted, plan.max_cost - budget.cost - call.reserved)
        grant = await self.ledger.reserve(
            context.request_id,
            call.call_id,
            live - call.reserved,
            max(wanted, live - call.reserved),
        )
        if grant.refusal is not None:
            refusal = grant.refusal
            # The ledger counted this call's reservation as spent; report the call whole.
            raise BudgetExceeded(
                refusal.budget,
                limit=refusal.limit,
                used=refusal.used - call.reserved,
                needed=live,
                unit=refusal.unit,
                mid_stream=True,
                resets=refusal.resets,
            )
        call.reserved += grant.amount

    async def _settle(
        self, context: AgentRunContext, budget: _RunBudget, call: _Call, amount: Decimal
    ) -> None:
        if call.settled:
            return
        call.settled = True
        budget.cost += amount
        if budget.plan.prices is not None:
            await self.ledger.settle(context.request_id, call.call_id, amount)
