"""Budget reservations on PostgreSQL: separate processes racing for one shared daily cap.

Each test gets a freshly migrated database of its own. A setup process creates the caps (a
user's, or a profile's that different users share), a price and one run per worker for each
cap; then worker processes (each its own connection) race a round per cap: they start
together on a file barrier and reserve, call after call, for their own run, settling each call
at what it reserved. Each cap must hold: the ledger's row locks (the user's, the profile's)
make each reservation see the others'.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

CAP = Decimal("0.200000")
CALL = Decimal("0.010000")  # what each call reserves (and needs at least)
WORKERS = 4
CALLS_PER_WORKER = 10  # 40 attempts a round for the 20 calls a cap holds
ROUNDS = 5  # one cap (a user's or a profile's) a round: each a fresh race

SETUP = r"""
import datetime, json, sys
from decimal import Decimal
import django
django.setup()
from django.contrib.auth import get_user_model
from agents.models import AgentProfile, ChatSession, ModelPrice, Run, UserBudget

cap, names, workers = Decimal(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
scope = sys.argv[4]  # "user": each name a user with a cap; "profile": a profile with a cap
shared = AgentProfile.objects.create(name="Budgeted", slug="budgeted", provider="demo")
ModelPrice.objects.create(
    provider="demo", model_pattern="demo", input_per_million=Decimal("1"),
    output_per_million=Decimal("1000"),
    valid_from=datetime.date.today() - datetime.timedelta(days=1),
)
runs = {}
for name in names:
    if scope == "user":
        owner = get_user_model().objects.create(username=name)
        UserBudget.objects.create(user=owner, daily_cost_cap=cap)
        profile = shared
    else:  # a user of its own for each worker, all on this profile
        profile = AgentProfile.objects.create(
            name=name, slug=name, provider="demo", daily_cost_cap=cap
        )
    runs[name] = []
    for number in range(workers):
        user = owner if scope == "user" else get_user_model().objects.create(
            username=f"{name}-{number}"
        )
        session = ChatSession.objects.create(owner=user, profile=profile)
        run = Run.objects.create(
            session=session, profile=profile, started_by=user, input_text=f"run {number}",
            status="running",
        )
        runs[name].append(run.request_id)
print(json.dumps({"runs": runs}))
"""

WORKER = r"""
import json, os, sys, time
from decimal import Decimal
import django
django.setup()
from agents.budgets import reserve_now, settle_now, price_in_force_now

request_ids, calls, amount = json.loads(sys.argv[1]), int(sys.argv[2]), Decimal(sys.argv[3])
barrier, workers = sys.argv[4], int(sys.argv[5])
# Warm up (connection, imports, caches) before the first barrier.
price_in_force_now("demo", "demo", None)
rounds = []
for index, request_id in enumerate(request_ids):
    # A barrier a round: the workers wait until all of them have arrived, then go at once.
    gate = os.path.join(barrier, str(index))
    os.makedirs(gate, exist_ok=True)
    open(os.path.join(gate, str(os.getpid())), "w").close()
    while len(os.listdir(gate)) < workers:
        time.sleep(0.0005)
    started = time.time()
    granted, refused = [], []
    for number in range(calls):
        call_id = f"call-{number}"
        grant = reserve_now(request_id, call_id, amount, amount)
        if grant.refusal is not None:
            r = grant.refusal
            refused.append({"budget": r.budget, "limit": str(r.limit), "used": str(r.used),
                            "needed": str(r.needed), "text": str(r)})
            continue
        settle_now(request_id, call_id, grant.amount)  # the call cost what it reserved
        granted.append(str(grant.amount))
    rounds.append({"granted": granted, "refused": refused, "started": started,
                   "ended": time.time()})
print(json.dumps(rounds))
"""

ROOM = r"""
import json, sys
from decimal import Decimal
import django
django.setup()
from agents.budgets import reserve_now, settle_now
from agents.models import BudgetCharge

request_id = sys.argv[1]
out = {}
first = reserve_now(request_id, "call-a", Decimal("0.08"), Decimal("0.08"))
out["first"] = str(first.amount)
blocked = reserve_now(request_id, "call-b", Decimal("0.05"), Decimal("0.05"))
out["blocked"] = blocked.refusal.budget if blocked.refusal else None
out["blocked_used"] = str(blocked.refusal.used) if blocked.refusal else None
settle_now(request_id, "call-a", Decimal("0.03"))  # cheaper than its estimate
later = reserve_now(request_id, "call-b", Decimal("0.05"), Decimal("0.05"))
out["later"] = str(later.amount)
out["later_refused"] = later.refusal.budget if later.refusal else None
full = reserve_now(request_id, "call-c", Decimal("0.05"), Decimal("0.05"))
out["full"] = full.refusal.budget if full.refusal else None
out["rows"] = sorted(
    [c.call_id, str(c.amount.normalize()), c.settled] for c in BudgetCharge.objects.all()
)
print(json.dumps(out))
"""


@pytest.fixture
def database(postgres_process_env: dict[str, str]) -> dict[str, str]:
    return postgres_process_env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


def _setup(
    env: dict[str, str], cap: Decimal, names: list[str], runs: int, scope: str = "user"
) -> dict[str, list]:
    setup = _run(["-c", SETUP, str(cap), ",".join(names), str(runs), scope], env)
    assert setup.returncode == 0, setup.stderr
    return _last_json(setup.stdout)["runs"]


def _charges(env: dict[str, str]) -> list[tuple[str, str, str, Decimal, bool]]:
    """(user, profile, request id, amount, settled) of every charge, in the order made."""
    import psycopg

    with psycopg.connect(env["DATABASE_URL"], connect_timeout=5) as connection:
        rows = connection.execute(
            "SELECT u.username, p.name, r.request_id, c.amount, c.settled"
            " FROM agents_budgetcharge c JOIN agents_run r ON r.id = c.run_id"
            " JOIN auth_user u ON u.id = c.user_id"
            " JOIN agents_agentprofile p ON p.id = c.profile_id"
            " ORDER BY c.created_at, c.id"
        ).fetchall()
    return [tuple(row) for row in rows]


@pytest.mark.parametrize("scope", ["user", "profile"])
def test_concurrent_processes_stay_within_a_shared_daily_cap(
    database: dict[str, str], tmp_path: Path, scope: str
) -> None:
    """scope "user": runs of one user; "profile": runs of different users on one profile."""
    names = [f"{scope}{number}" for number in range(ROUNDS)]
    runs = _setup(database, CAP, names, WORKERS, scope)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                json.dumps([runs[name][worker] for name in names]),
                str(CALLS_PER_WORKER),
                str(CALL),
                str(tmp_path),
                str(WORKERS),
            ],
            cwd=REPO_ROOT,
            env=database,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker in range(WORKERS)
    ]
    try:
        outputs = [worker.communicate(timeout=180) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr
    results = [_last_json(stdout) for stdout, _ in outputs]
    all_charges = _charges(database)

    for index, name in enumerate(names):
        rounds = [result[index] for result in results]
        if scope == "user":
            cap_name = f"{name}'s daily cost cap"
            charges = [charge[2:] for charge in all_charges if charge[0] == name]
        else:
            cap_name = f"the {name} profile's daily cost cap"
            charges = [charge[2:] for charge in all_charges if charge[1] == name]
        total = sum((amount for _, amount, _ in charges), Decimal(0))
        granted = sum((Decimal(a) for r in rounds for a in r["granted"]), Decimal(0))
        refusals = [refusal for r in rounds for refusal in r["refused"]]

        # They raced: the loops overlapped in time and their charges interleave.
        assert max(r["started"] for r in rounds) < min(r["ended"] for r in rounds)
        switches = sum(1 for a, b in zip(charges, charges[1:], strict=False) if a[0] != b[0])
        assert switches >= WORKERS - 1, charges
        # What the workers were granted is what the database holds, all of it settled.
        assert total == granted and all(settled for *_, settled in charges)
        assert len(charges) == sum(len(r["granted"]) for r in rounds)
        # The bound: together at most one call's reservation over the cap ...
        assert total <= CAP + CALL, f"{name}: {total} reserved against a cap of {CAP}"
        # ... and since no call cost more than it reserved, not over the cap at all; yet the
        # cap was used up: less than a call's worth is left.
        assert CAP - CALL < total <= CAP, f"{name}: {total} reserved against a cap of {CAP}"
        # The rest were refused, each naming the cap, its size and a call's need.
        assert len(refusals) == WORKERS * CALLS_PER_WORKER - len(charges) > 0
        for refusal in refusals:
            assert refusal["budget"] == cap_name, refusal
            assert Decimal(refusal["limit"]) == CAP and Decimal(refusal["needed"]) == CALL
            assert Decimal(refusal["used"]) > CAP - CALL
            assert f"{cap_name} (0.2 USD)" in refusal["text"], refusal


def test_a_call_settled_below_its_reservation_frees_room_for_a_later_one(
    database: dict[str, str],
) -> None:
    (run,) = _setup(database, Decimal("0.10"), ["alice"], 1)["alice"]
    room = _run(["-c", ROOM, run], database)
    assert room.returncode == 0, room.stderr
    result = _last_json(room.stdout)

    assert Decimal(result["first"]) == Decimal("0.08")
    # 0.02 left: a call needing 0.05 is refused, naming the cap and what was reserved.
    assert result["blocked"] == "alice's daily cost cap"
    assert Decimal(result["blocked_used"]) == Decimal("0.08")
    # The first call cost 0.03: 0.07 is free again and the same call now gets its 0.05.
    assert Decimal(result["later"]) == Decimal("0.05") and result["later_refused"] is None
    # 0.08 spent: the next call's 0.05 does not fit.
    assert result["full"] == "alice's daily cost cap"
    assert result["rows"] == [["call-a", "0.03", True], ["call-b", "0.05", False]]
