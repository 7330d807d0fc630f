"""Group commit of run starts: starts that wait together share one hop, each with its own result.

A burst of run starts used to make one ORM hop each, all queued on the one ORM thread. Now the
starts that arrive while a hop runs go together in the next one (one transaction, a savepoint
each), and nothing one start does (another run is active, a row that breaks a constraint)
reaches the others.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from asgiref.sync import SyncToAsync, sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.group_commit import GroupCommit
from agents.hosting import db, starts
from agents.models import ChatSession, Message, Run, RunEvent, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions sent to the ORM thread, in order."""
    names: list[str] = []
    enter = SyncToAsync.__call__

    @functools.wraps(enter)
    async def counting(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        if self._thread_sensitive:
            names.append(getattr(self.func, "__qualname__", type(self.func).__name__))
        return await enter(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)
    return names


def _start(session: Any, user: Any, text: str = "hello") -> Any:
    return starts.create_run(str(session.id), user.pk, text, "host-a", user.username, text)


async def test_starts_that_wait_together_share_one_hop(
    user: Any, make_profile: Any, make_session: Any, hops: list[str]
) -> None:
    profile = await make_profile(extensions=(("session_store", {}),))
    sessions = [await make_session(user, profile) for _ in range(12)]
    hops.clear()

    pending = [_start(s, user, f"message {i}") for i, s in enumerate(sessions)]
    started = await asyncio.gather(*pending)

    assert all(isinstance(intake, starts.Intake) for intake in started), started
    assert hops == ["create_runs_now"]  # twelve starts, one hop
    assert [intake.session.pk for intake in started] == [s.pk for s in sessions]
    for i, intake in enumerate(started):
        assert intake.run.input_text == f"message {i}"
        assert intake.history is not None
        rows, run_pk = intake.history
        assert run_pk == intake.run.pk
        assert [(row.seq, row.content) for row in rows] == [(1, f"message {i}")]
    assert await Run.objects.filter(status=RunStatus.RUNNING).acount() == 12
    assert await Message.objects.acount() == 12


async def test_two_starts_of_one_session_in_one_batch_make_one_run(
    user: Any, make_profile: Any, make_session: Any, hops: list[str]
) -> None:
    profile = await make_profile()
    first, busy = await make_session(user, profile), await make_session(user, profile)
    hops.clear()

    results = await asyncio.gather(
        _start(first, user), _start(busy, user, "one"), _start(busy, user, "two")
    )

    assert hops == ["create_runs_now"]  # "one" and "two" went in one batch
    assert isinstance(results[0], starts.Intake) and isinstance(results[1], starts.Intake)
    assert results[2] == "active"
    assert [m.content async for m in Message.objects.filter(session=busy).order_by("seq")] == [
        "one"
    ]


async def test_a_start_that_breaks_a_constraint_fails_alone(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile()
    sessions = [await make_session(user, profile) for _ in range(4)]
    pending = [_start(s, user) for s in sessions]
    # No such user: the foreign key is checked at commit, so the batch's commit fails.
    pending.insert(2, starts.create_run(str(sessions[3].id), 10**9, "x", "host-a", "ghost", None))

    results = await asyncio.gather(*pending, return_exceptions=True)

    assert isinstance(results[2], Exception), results
    assert [isinstance(r, starts.Intake) for r in results] == [True, True, False, True, True]
    assert await Run.objects.acount() == 4
    assert await Run.objects.filter(started_by_id=10**9).aexists() is False


async def test_the_batcher_hands_each_caller_its_own_result_or_error() -> None:
    batches: list[list[int]] = []
    release = asyncio.Event()

    async def write_all(requests: list[int]) -> list[int | Exception]:
        batches.append(list(requests))
        if len(batches) == 1:
            await release.wait()
        return [ValueError(n) if n % 3 == 0 else n * 10 for n in requests]

    batcher: GroupCommit[int, int] = GroupCommit(write_all)
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batcher.submit(n)) for n in range(2, 8)]
    release.set()
    results = await asyncio.gather(first, *rest, return_exceptions=True)

    assert batches == [[1], [2, 3, 4, 5, 6, 7]]
    assert [r if isinstance(r, int) else repr(r) for r in results] == [
        10,
        20,
        "ValueError(3)",
        40,
        50,
        "ValueError(6)",
        70,
    ]


async def test_a_failed_batch_fails_only_its_own_callers() -> None:
    async def write_all(requests: list[int]) -> list[int | Exception]:
        if 1 in requests:
            raise RuntimeError("database away")
        return list(requests)

    batcher: GroupCommit[int, int] = GroupCommit(write_all)
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(batcher.submit(2))

    with pytest.raises(RuntimeError, match="database away"):
        await first
    assert await second == 2


async def test_streaming_checkpoints_waiting_together_share_one_hop(
    user: Any, make_profile: Any, make_session: Any, hops: list[str]
) -> None:
    profile = await make_profile()
    sessions = [await make_session(user, profile) for _ in range(3)]
    runs = [(await _start(s, user)).run for s in sessions]
    await Run.objects.filter(pk=runs[2].pk).aupdate(status=RunStatus.COMPLETED, partial_text="")
    hops.clear()

    await asyncio.gather(*(db.save_partial(run.pk, f"so far {i}") for i, run in enumerate(runs)))

    assert hops == ["save_partials_now"]
    stored = {r.pk: r.partial_text async for r in Run.objects.all()}
    # An ended run keeps its final record: the checkpoint only writes active runs.
    assert stored == {runs[0].pk: "so far 0", runs[1].pk: "so far 1", runs[2].pk: ""}


async def test_run_checkpoints_waiting_together_share_one_hop(
    user: Any, make_profile: Any, make_session: Any, hops: list[str]
) -> None:
    profile = await make_profile()
    sessions = [await make_session(user, profile) for _ in range(3)]
    runs = [(await _start(s, user)).run for s in sessions]
    for i, run in enumerate(runs):
        run.phase = f"phase {i}"
    traces: list[list[Any]] = [[], [], []]
    hops.clear()

    await asyncio.gather(
        *(db.checkpoint(run, traces[i], {"phase"}, "waiting") for i, run in enumerate(runs))
    )

    assert hops == ["checkpoints_now"]
    assert {r.pk: r.phase async for r in Run.objects.all()} == {
        run.pk: f"phase {i}" for i, run in enumerate(runs)
    }
    statuses = [s.status async for s in ChatSession.objects.filter(pk__in=[s.pk for s in sessions])]
    assert statuses == ["waiting"] * 3


async def test_run_finishes_waiting_together_share_one_hop(
    user: Any, make_profile: Any, make_session: Any, hops: list[str]
) -> None:
    profile = await make_profile()
    sessions = [await make_session(user, profile) for _ in range(3)]
    runs = [(await _start(s, user)).run for s in sessions]
    traces: list[list[RunEvent]] = []
    for i, run in enumerate(runs):
        run.status, run.phase, run.output_tokens = RunStatus.COMPLETED, "done", 10 + i
        traces.append([RunEvent(run=run, seq=1, last_seq=1, type="run.finished", phase="done")])
    partials = [None, ("half an answer", "", {"stopped": "cancelled"}), None]
    hops.clear()

    stored = await asyncio.gather(
        *(
            db.finish_run(run, traces[i], ("status", "phase", "output_tokens"), partials[i])
            for i, run in enumerate(runs)
        )
    )

    assert hops == ["finish_runs_now"]  # three final records, one hop
    assert stored[0] is None and stored[2] is None
    assert stored[1] is not None and stored[1]["content"] == "half an answer"
    assert {r.pk: (r.status, r.output_tokens) async for r in Run.objects.all()} == {
        run.pk: (RunStatus.COMPLETED, 10 + i) for i, run in enumerate(runs)
    }
    assert all(trace == [] for trace in traces)  # cleared once committed
    assert await RunEvent.objects.acount() == 3
    statuses = [s.status async for s in ChatSession.objects.filter(pk__in=[s.pk for s in sessions])]
    assert statuses == ["idle"] * 3
    partial_rows = Message.objects.filter(session=sessions[1], role="assistant")
    assert [m.content async for m in partial_rows] == ["half an answer"]


def _statements_of_starts(count: int, user: Any, profile: Any) -> int:
    sessions = [ChatSession.objects.create(owner=user, profile=profile) for _ in range(count)]
    requests = [
        starts.StartRequest(str(s.pk), user.pk, f"message {i}", "host-a", user.username, None)
        for i, s in enumerate(sessions)
    ]
    with CaptureQueriesContext(connection) as queries:
        results = starts.create_runs_now(requests)
    assert all(isinstance(r, starts.Intake) for r in results), results
    return len(queries)


async def test_a_batch_of_starts_writes_in_statements_that_do_not_grow_with_it(
    user: Any, make_profile: Any
) -> None:
    profile = await make_profile(extensions=(("session_store", {}),))
    few, many = await asyncio.gather(
        sync_to_async(_statements_of_starts)(2, user, profile),
        sync_to_async(_statements_of_starts)(12, user, profile),
    )
    # One INSERT of the runs, one of their messages, one UPDATE of the sessions, one read
    # of their histories: not a savepoint and three writes for each start.
    assert few == many
    assert await Run.objects.acount() == 14
    assert [m.content async for m in Message.objects.order_by("content")][:2] == [
        "message 0",
        "message 0",
    ]
