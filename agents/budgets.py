"""The budgets' numbers from the database: prices, limits, what was spent, reservations.

``DatabaseLedger`` is the host side of the ``budget`` extension (agents.extensions.budget):
it reads a run's plan (its profile's per-run limits, the price in force), and reserves and
settles model calls against the shared cost caps (per user per UTC day and month, per
profile per UTC day) in one transaction each. The transaction first locks the user's and
the profile's rows (``select_for_update`` on PostgreSQL; SQLite runs write transactions
one at a time, IMMEDIATE), so two runs reserving at once see each other's reservations.

``start_refusal_for`` is the check before a run is created: a user or profile already at a cap
cannot start one, and the message says when the cap resets.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone

from .db_retry import retrying
from .extensions.budget import BudgetExceeded, BudgetGrant, BudgetPlan
from .models import AgentProfile, BudgetCharge, ChatSession, ModelPrice, Run, RunStatus, UserBudget
from .runtime.pricing import TokenPrices, pattern_matches, specificity

BUDGET_KEY = "budget"  # the extension's catalog key; added to a run's rows when a budget applies


def price_in_force_now(provider: str, model_name: str, when: datetime | None) -> TokenPrices | None:
    """The prices of the model on the day ``when`` falls on; None when no price is set.

    Among the prices in force, an exact model name wins over a glob, and a longer glob over
    a shorter one; for one pattern, the latest ``valid_from`` not after that day.
    """
    day = timezone.localdate(when or timezone.now())
    rows = ModelPrice.objects.filter(provider=provider, valid_from__lte=day).order_by("-valid_from")
    best: ModelPrice | None = None
    for row in rows:
        if not pattern_matches(row.model_pattern, model_name):
            continue
        if best is None or specificity(row.model_pattern) > specificity(best.model_pattern):
            best = row
    if best is None:
        return None
    return TokenPrices(
        input=best.input_per_million,
        output=best.output_per_million,
        cache_read=best.cache_read_per_million,
        cache_write=best.cache_write_per_million,
        currency=best.currency,
    )


# -- periods -------------------------------------------------------------------------------


def day_start(now: datetime) -> datetime:
    now = now.astimezone(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(now: datetime) -> datetime:
    return day_start(now).replace(day=1)


def next_day(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def next_month(now: datetime) -> datetime:
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


def _when(moment: datetime) -> str:
    return moment.strftime("at %Y-%m-%d %H:%M UTC")


@dataclass(frozen=True, slots=True)
class Cap:
    """One cost cap that applies to a run: its name, size, period and what it covers."""

    name: str  # for messages: "alice's daily cost cap"
    limit: Decimal
    since: datetime  # the period's start
    resets: datetime  # the next period's start
    user_id: int | None = None  # the user's spending, or
    profile_id: int | None = None  # the profile's spending

    def spent(self) -> Decimal:
        """Charges of the period plus the cost of ended runs that have no charges."""
        charges = BudgetCharge.objects.filter(created_at__gte=self.since)
        runs = Run.objects.filter(created_at__gte=self.since, cost__isnull=False).exclude(
            status__in=RunStatus.active()
        )
        if self.user_id is not None:
            charges = charges.filter(user_id=self.user_id)
            runs = runs.filter(
                Q(started_by_id=self.user_id)
                | Q(started_by__isnull=True, session__owner_id=self.user_id)
            )
        else:
            charges = charges.filter(profile_id=self.profile_id)
            runs = runs.filter(profile_id=self.profile_id)
        runs = runs.filter(~Exists(BudgetCharge.objects.filter(run=OuterRef("pk"))))
        total = charges.aggregate(total=Sum("amount"))["total"] or Decimal(0)
        return total + (runs.aggregate(total=Sum("cost"))["total"] or Decimal(0))


def _default(name: str) -> Decimal | None:
    value = getattr(settings, name, None)
    return None if value is None else Decimal(value)


def caps_for(user_id: int | None, profile: AgentProfile | None, now: datetime) -> list[Cap]:
    """The cost caps in force for a user and a profile at ``now``."""
    caps: list[Cap] = []
    if user_id is not None:
        row = UserBudget.objects.filter(user_id=user_id).first()
        daily = row.daily_cost_cap if row and row.daily_cost_cap is not None else None
        monthly = row.monthly_cost_cap if row and row.monthly_cost_cap is not None else None
        daily = daily if daily is not None else _default("ZETT_USER_DAILY_COST_CAP")
        monthly = monthly if monthly is not None else _default("ZETT_USER_MONTHLY_COST_CAP")
        user = get_user_model().objects.filter(pk=user_id).first()
        who = f"{user.get_username()}'s" if user is not None else "the user's"
        if daily is not None:
            caps.append(
                Cap(f"{who} daily cost cap", daily, day_start(now), next_day(now), user_id=user_id)
            )
        if monthly is not None:
            caps.append(
                Cap(
                    f"{who} monthly cost cap",
                    monthly,
                    month_start(now),
                    next_month(now),
                    user_id=user_id,
                )
            )
    if profile is not None and profile.daily_cost_cap is not None:
        caps.append(
            Cap(
                f"the {profile.name} profile's daily cost cap",
                profile.daily_cost_cap,
                day_start(now),
                next_day(now),
                profile_id=profile.pk,
            )
        )
    return caps


def budget_applies_now(profile: AgentProfile, user_id: int | None) -> bool:
    """Whether a limit bounds this profile's runs for this user (the host then adds it)."""
    if (
        profile.max_tokens_per_run is not None
        or profile.max_cost_per_run is not None
        or profile.daily_cost_cap is not None
    ):
        return True
    if user_id is None:
        return False
    if _default("ZETT_USER_DAILY_COST_CAP") is not None:
        return True
    if _default("ZETT_USER_MONTHLY_COST_CAP") is not None:
        return True
    return UserBudget.objects.filter(user_id=user_id).exists()


def _run_owner(run: Run) -> int | None:
    return run.started_by_id or run.session.owner_id


def _lock(user_id: int | None, profile_id: int | None) -> None:
    """Serialise reservations of one user and one profile (row locks on PostgreSQL)."""
    if user_id is not None:
        list(get_user_model().objects.select_for_update().filter(pk=user_id).values("pk"))
    if profile_id is not None:
        list(AgentProfile.objects.select_for_update().filter(pk=profile_id).values("pk"))


# -- the ledger ---------------------------------------------------------------------------


def plan_now(request_id: str) -> BudgetPlan:
    """The run's limits and prices; no limits for a request without a Run (a dry run)."""
    run = (
        Run.objects.select_related("profile", "session__profile")
        .filter(request_id=request_id)
        .first()
    )
    if run is None:
        return BudgetPlan()
    profile = run.profile or run.session.profile
    prices = price_in_force_now(
        profile.provider, profile.model_name, run.started_at or run.created_at
    )
    return BudgetPlan(
        prices=prices,
        max_tokens=profile.max_tokens_per_run,
        max_cost=profile.max_cost_per_run,
    )


def reserve_now(request_id: str, call_id: str, minimum: Decimal, wanted: Decimal) -> BudgetGrant:
    """Grant up to ``wanted`` of what the caps leave, or refuse below ``minimum``."""
    run = Run.objects.select_related("session", "profile").get(request_id=request_id)
    user_id = _run_owner(run)
    now = timezone.now()
    with transaction.atomic():
        _lock(user_id, run.profile_id)
        profile = AgentProfile.objects.filter(pk=run.profile_id).first()
        caps = caps_for(user_id, profile, now)
        grant = wanted
        currency = _currency(run)
        for cap in caps:
            spent = cap.spent()
            left = cap.limit - spent
            if left < minimum:
                return BudgetGrant(
                    refusal=BudgetExceeded(
                        cap.name,
                        limit=cap.limit,
                        used=spent,
                        needed=minimum,
                        unit=currency,
                        resets=_when(cap.resets),
                    )
                )
            grant = min(grant, left)
        charge, created = BudgetCharge.objects.get_or_create(
            run=run,
            call_id=call_id,
            defaults={
                "user_id": user_id,
                "profile_id": run.profile_id,
                "amount": grant,
                "created_at": now,
            },
        )
        if not created:
            charge.amount += grant
            charge.save(update_fields=["amount"])
    return BudgetGrant(grant)


def settle_now(request_id: str, call_id: str, amount: Decimal) -> None:
    BudgetCharge.objects.filter(run__request_id=request_id, call_id=call_id).update(
        amount=amount, settled=True
    )


def _currency(run: Run) -> str:
    profile = run.profile
    if profile is None:
        return ""
    prices = price_in_force_now(
        profile.provider, profile.model_name, run.started_at or run.created_at
    )
    return prices.currency if prices is not None else ""


class DatabaseLedger:
    """The budget extension's ledger on the dashboard's database (retried hops)."""

    async def plan(self, session_id: str, request_id: str) -> BudgetPlan:
        return await retrying(plan_now, request_id)

    async def reserve(
        self, request_id: str, call_id: str, minimum: Decimal, wanted: Decimal
    ) -> BudgetGrant:
        return await retrying(reserve_now, request_id, call_id, minimum, wanted)

    async def settle(self, request_id: str, call_id: str, amount: Decimal) -> None:
        await retrying(settle_now, request_id, call_id, amount)


# -- the check before a run starts --------------------------------------------------------


def start_refusal_for(session: ChatSession, user_id: int | None) -> str | None:
    """Why this user cannot start a run in this session now (a cap is used up), or None.

    ``session`` is read with its profile.
    """
    now = timezone.now()
    for cap in caps_for(user_id if user_id is not None else session.owner_id, session.profile, now):
        spent = cap.spent()
        if spent >= cap.limit:
            return (
                f"Budget exceeded: {cap.name} ({_amount(cap.limit)}) is used up "
                f"({_amount(spent)} spent). It resets {_when(cap.resets)}."
            )
    return None


def _amount(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.000001')).normalize():f}"
