"""Batched writes with one prepared statement: the same rows as the ORM's update and bulk_create."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction

from agents.bulk_sql import insert_rows, update_rows
from agents.models import Message, Run, RunEvent, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _runs(make: Any, count: int) -> list[Run]:
    """``count`` running runs, each in a session of its own (one active run per session)."""
    return [
        Run.objects.create(session=make(), request_id=f"r{i}", input_text="hi", status="running")
        for i in range(count)
    ]


def test_update_rows_writes_the_values_as_the_orm_would_and_only_the_named_fields(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = async_to_sync(make_profile)()
    one, two, three = _runs(lambda: async_to_sync(make_session)(user, profile), 3)
    finished = datetime(2026, 12, 8, 1, 2, 3, 456789, tzinfo=UTC)
    waits = [{"kind": "approval", "id": "c1", "arguments": {"x": [1, "ü"]}}]

    with transaction.atomic():
        update_rows(
            Run,
            ["cost", "finished_at", "waiting_for"],
            [(one.pk, [Decimal("0.0001234567"), finished, waits]), (two.pk, [None, None, []])],
        )

    one.refresh_from_db()
    two.refresh_from_db()
    three.refresh_from_db()
    assert (one.cost, one.finished_at) == (Decimal("0.0001234567"), finished)
    assert one.waiting_for == waits
    assert (two.cost, two.finished_at, two.waiting_for) == (None, None, [])
    assert one.input_text == "hi" and one.status == "running"  # fields not named stay
    assert three.waiting_for == [] and three.finished_at is None


def test_update_rows_leaves_a_row_whose_guard_field_holds_another_value(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = async_to_sync(make_profile)()
    active, done = _runs(lambda: async_to_sync(make_session)(user, profile), 2)
    Run.objects.filter(pk=done.pk).update(status=RunStatus.COMPLETED, partial_text="final")

    update_rows(
        Run,
        ["partial_text"],
        [(active.pk, ["so far"]), (done.pk, ["late"])],
        only_if_in=("status", RunStatus.active()),
    )

    assert dict(Run.objects.values_list("request_id", "partial_text")) == {
        "r0": "so far",
        "r1": "final",
    }


def test_insert_rows_skips_conflicts_when_asked_and_otherwise_fails_the_whole(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    session = async_to_sync(make_session)(user, async_to_sync(make_profile)())
    (run,) = _runs(lambda: session, 1)
    RunEvent.objects.create(run=run, seq=2, last_seq=2, type="old", phase="x")

    def event(seq: int) -> RunEvent:
        return RunEvent(run=run, seq=seq, last_seq=seq, type="new", phase="x", data={"s": seq})

    insert_rows([event(1), event(2), event(3)], ignore_conflicts=True)
    stored = list(RunEvent.objects.order_by("seq").values_list("seq", "type", "data"))
    assert stored == [(1, "new", {"s": 1}), (2, "old", {}), (3, "new", {"s": 3})]
    assert all(e.at is not None for e in RunEvent.objects.all())  # defaults applied

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows([event(4), event(3)])
    assert RunEvent.objects.count() == 3  # nothing of the failed batch stays

    message = Message(session=session, run=run, seq=1, message_id="m1", role="user", content="x")
    insert_rows([message])
    assert Message.objects.get().content == "x"
