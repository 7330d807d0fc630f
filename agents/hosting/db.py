"""Every database hop of the host: short ORM functions, one transaction each, retried.

No policy lives here: callers decide, these functions read and write. Each async function
is a ``db_hop`` (connection errors retried on a fresh connection, see agents.db_retry); the
lease and the reaper run on worker threads with their own connections so they never wait
behind the runs' writes on the ORM thread. A run's start (and a worker's claim) has its
own module, ``starts``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from ..bulk_sql import insert_rows, update_rows
from ..db_retry import db_hop, db_hop_own_thread
from ..extensions.summary_compaction import SUMMARY_PREFIX
from ..group_commit import GroupCommit, each_alone_if_whole_fails
from ..models import (
    ChatSession,
    Host,
    Message,
    OperatorAction,
    Role,
    Run,
    RunEvent,
    RunStatus,
    SessionStatus,
)
from ..per_loop import PerLoop
from ..runtime.ids import new_uuid7
from .payloads import divider_dict, message_dict, notice, run_row_of, usage_label
from .starts import ExtensionRows, extension_rows_of, session_with_profile
from .wire import WORKER_CHANNEL


@db_hop
def load_session(session_id: str) -> tuple[ChatSession, ExtensionRows] | None:
    session = session_with_profile(session_id)
    if session is None:
        return None
    return session, extension_rows_of(session.profile_id)


@db_hop
def load_user(user_id: int | None) -> Any:
    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


def _next_seq(session_id: str) -> int:
    last = Message.objects.filter(session_id=session_id).aggregate(last=Max("seq"))["last"]
    return (last or 0) + 1


Checkpoint = tuple[Run, list[RunEvent], "set[str] | tuple[str, ...]", "str | None"]


def checkpoints_now(checkpoints: list[Checkpoint]) -> list[None | Exception]:
    """Write many runs' checkpoints in one transaction; each trace is cleared once committed.

    If the transaction fails, nothing of it is written and every caller gets the error (each
    keeps its trace for the next write).
    """
    with transaction.atomic():
        status_of = {  # each session's status, the batch's last one winning
            run.session_id: session for run, _, _, session in checkpoints if session is not None
        }
        _write_runs([(run, fields, trace) for run, trace, fields, _ in checkpoints])
        now = timezone.now()
        for status in set(status_of.values()):  # a statement per status, not one per run
            sessions = [pk for pk, value in status_of.items() if value == status]
            ChatSession.objects.filter(pk__in=sessions).update(status=status, updated_at=now)
    for _, trace, _, _ in checkpoints:
        trace.clear()
    return [None] * len(checkpoints)


def _write_runs(runs: list[tuple[Run, set[str] | tuple[str, ...], list[RunEvent]]]) -> None:
    """Each run's named fields (one statement per set of fields, run for every run that has
    it) and the runs' unwritten trace entries (one INSERT; entries already stored are
    skipped). Inside the caller's transaction."""
    by_fields: dict[tuple[str, ...], list[tuple[int, list[Any]]]] = {}
    events: list[RunEvent] = []
    for run, fields, trace in runs:
        if fields:
            names = tuple(sorted(set(fields)))
            by_fields.setdefault(names, []).append((run.pk, [getattr(run, n) for n in names]))
        events += trace
    for names, rows in by_fields.items():
        update_rows(Run, names, rows)
    insert_rows(events, ignore_conflicts=True)


_checkpoints_hop = db_hop(checkpoints_now)
_checkpoints: PerLoop[GroupCommit[Checkpoint, None]] = PerLoop()


async def checkpoint(
    run: Run, trace: list[RunEvent], fields: set[str] | tuple[str, ...], session: str | None
) -> None:
    """Write the run's changed fields, its unwritten trace and the session's status at once.

    In one hop and one transaction with the other runs' checkpoints waiting at that moment.
    """
    item: Checkpoint = (run, trace, fields, session)
    await _checkpoints.get(lambda: GroupCommit(_checkpoints_hop)).submit(item)


def _store_partial(
    run: Run, text: str, reasoning: str, attributes: dict[str, Any]
) -> Message | None:
    if not (text or reasoning):
        return None
    return Message.objects.create(
        session_id=run.session_id,
        run=run,
        seq=_next_seq(run.session_id),
        message_id=new_uuid7(),
        role=Role.ASSISTANT,
        content=text,
        reasoning=reasoning,
        include_in_messages=False,  # what the model never finished is not its context
        attributes={"partial": True, **attributes},
    )


Finish = tuple[Run, list[RunEvent], tuple[str, ...], "tuple[str, str, dict[str, Any]] | None"]


def finish_runs_now(finishes: list[Finish]) -> list[dict[str, Any] | None | Exception]:
    """The final records of many runs in ONE transaction; each run's result (see finish_run).

    A connection error fails the whole batch (nothing committed), which the hop retries; any
    other failure of the whole sends each run on alone, so one bad record fails only its run.
    """
    return each_alone_if_whole_fails(_finish_together, finishes)


def _finish_together(finishes: list[Finish]) -> list[dict[str, Any] | None]:
    stored: list[Message | None] = []
    with transaction.atomic():
        _write_runs([(run, fields, trace) for run, trace, fields, _ in finishes])
        for run, _, _, partial in finishes:
            stored.append(_store_partial(run, *partial) if partial is not None else None)
        ChatSession.objects.filter(pk__in={run.session_id for run, *_ in finishes}).update(
            status=SessionStatus.IDLE, updated_at=timezone.now()
        )
    for _, trace, _, _ in finishes:
        trace.clear()
    return [
        message_dict(message, request_id=run.request_id) if message is not None else None
        for (run, *_), message in zip(finishes, stored, strict=True)
    ]


_finish_hop = db_hop(finish_runs_now)
_finishes: PerLoop[GroupCommit[Finish, dict[str, Any] | None]] = PerLoop()


async def finish_run(
    run: Run,
    trace: list[RunEvent],
    fields: tuple[str, ...],
    partial: tuple[str, str, dict[str, Any]] | None,
) -> dict[str, Any] | None:
    """The final record of a run: its fields, trace, partial answer and an idle session.

    In one hop and one transaction with the other runs' final records waiting at that
    moment. Returns the stored partial answer's message dict, if there was one.
    """
    item: Finish = (run, trace, fields, partial)
    return await _finishes.get(lambda: GroupCommit(_finish_hop)).submit(item)


@db_hop
def active_run(session_id: str) -> Run | None:
    return Run.objects.filter(session_id=session_id, status__in=RunStatus.active()).first()


@db_hop
def request_cancel(run_pk: int) -> None:
    Run.objects.filter(pk=run_pk, cancel_state="").update(cancel_state="requested")


@db_hop
def row_for(run: Run) -> dict[str, Any]:
    return run_row_of(
        Run.objects.select_related("session__owner", "session__profile", "profile").get(pk=run.pk)
    )


def transcript_now(session_id: str) -> list[dict[str, Any]]:
    """The session's messages in order, with a notice after each run that did not complete.

    A notice is ``{"role": "notice", "status", "content": <reason>, "request_id", "id"}``.
    The last message of each completed run (its answer) carries ``"usage"``: the run's quiet
    line, "1,234 tokens · $0.0123".
    """
    rows = list(Message.objects.filter(session_id=session_id).select_related("run").order_by("seq"))
    # A compaction summary stands in for older messages in the model context; the
    # transcript keeps the originals and shows the summary as a divider below them.
    summarized: dict[int, int] = {}
    last_summarized: dict[int, int] = {}  # summary pk -> seq of the last row it summarises
    for row in rows:
        if row.summarized_by_id is not None:
            summarized[row.summarized_by_id] = summarized.get(row.summarized_by_id, 0) + 1
            last_summarized[row.summarized_by_id] = row.seq
    # The divider goes right below what it summarised, above the messages kept verbatim.
    rows.sort(key=lambda row: (last_summarized.get(row.pk, row.seq), row.pk in last_summarized))
    ended = {
        run.pk: run
        for run in Run.objects.filter(
            session_id=session_id,
            status__in=(
                RunStatus.FAILED,
                RunStatus.CANCELLED,
                RunStatus.INTERRUPTED,
                RunStatus.BUDGET_EXCEEDED,
            ),
        )
    }
    items: list[dict[str, Any]] = []
    last_of_run = {row.run_id: index for index, row in enumerate(rows) if row.run_id}
    for index, row in enumerate(rows):
        request_id = row.run.request_id if row.run else None
        if (row.attributes or {}).get("compaction_summary"):
            summary = row.content.removeprefix(SUMMARY_PREFIX)
            item = divider_dict(row.message_id, summary, summarized.get(row.pk, 0), request_id)
        else:
            item = message_dict(row, request_id=request_id)
        items.append(item)
        if row.run_id is None or last_of_run[row.run_id] != index:
            continue
        if row.run.status == RunStatus.COMPLETED:
            item["usage"] = usage_label(row.run)
        elif row.run_id in ended:
            items.append(notice(ended[row.run_id]))
    return items


transcript = db_hop(transcript_now)


@db_hop
def record_action(
    session_id: str,
    request_id: str | None,
    user_id: int | None,
    action: str,
    payload: dict[str, Any],
    accepted: bool,
    reason: str,
) -> None:
    run = Run.objects.filter(request_id=request_id).first() if request_id else None
    OperatorAction.objects.create(
        session_id=session_id,
        run=run,
        user_id=user_id,
        action=action,
        payload={k: v for k, v in payload.items() if k != "HEADERS"},
        outcome="accepted" if accepted else "rejected",
        reason=reason,
    )


# -- liveness: the host lease and the reaper ---------------------------------------------


def renew_lease_now(host_id: str) -> None:
    """Renew (or create) this process's lease; runs on the lease thread's own connection."""
    now = timezone.now()
    if not Host.objects.filter(pk=host_id).update(renewed_at=now):
        Host.objects.update_or_create(pk=host_id, defaults={"renewed_at": now})


def drop_lease_now(host_id: str) -> None:
    Host.objects.filter(pk=host_id).delete()


def reap_now(own_host: str | None, cutoff: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """Mark active runs whose host's lease expired before ``cutoff`` as interrupted.

    A host never reaps itself (``own_host``). Unclaimed runs are reaped when they waited
    since before ``cutoff``. Each run is updated only while still active, so processes
    reaping at once never report one run twice; a run's streaming answer (its last
    checkpoint) is kept as a partial message. Returns (request id, session id, row).
    """
    live_hosts = Host.objects.filter(renewed_at__gte=cutoff).values("host_id")
    candidates = Run.objects.filter(status__in=RunStatus.active()).filter(
        Q(host="", created_at__lt=cutoff) | (~Q(host="") & ~Q(host__in=live_hosts))
    )
    if own_host is not None:
        candidates = candidates.exclude(host=own_host)
    reaped = []
    now = timezone.now()
    for run in candidates.select_related("session__owner", "session__profile", "profile"):
        error = (
            f"Interrupted: no worker picked this run up (is `manage.py runworker "
            f"{WORKER_CHANNEL}` running?)."
            if not run.host
            else "Interrupted: the server process hosting this run stopped."
        )
        with transaction.atomic():
            updated = Run.objects.filter(pk=run.pk, status__in=RunStatus.active()).update(
                status=RunStatus.INTERRUPTED,
                phase="failed",
                current_tool="",
                waiting_for=[],
                partial_text="",
                finished_at=now,
                error=error,
            )
            if not updated:
                continue
            _store_partial(run, run.partial_text, "", {"stopped": RunStatus.INTERRUPTED})
            ChatSession.objects.filter(pk=run.session_id).update(
                status=SessionStatus.IDLE, updated_at=now
            )
        run.status, run.phase, run.error = RunStatus.INTERRUPTED, "failed", error
        run.current_tool, run.waiting_for, run.finished_at = "", [], now
        reaped.append((run.request_id, run.session_id, run_row_of(run)))
    Host.objects.filter(renewed_at__lt=cutoff - timedelta(days=1)).delete()
    return reaped


reap = db_hop_own_thread(reap_now)


@db_hop_own_thread
def still_active(host_id: str, request_ids: list[str]) -> set[str]:
    """Those of our runs the database still shows active (others were reaped meanwhile)."""
    return set(
        Run.objects.filter(
            host=host_id, request_id__in=request_ids, status__in=RunStatus.active()
        ).values_list("request_id", flat=True)
    )


def save_partials_now(partials: list[tuple[int, str]]) -> list[None | Exception]:
    """Checkpoint streaming answers (run pk, text so far) of many runs in one statement.

    Only while each run is active: a finished run's final record is never overwritten.
    """
    latest = dict(partials)  # a run's later checkpoint in the batch wins
    with transaction.atomic():
        update_rows(
            Run,
            ["partial_text"],
            [(pk, [text]) for pk, text in latest.items()],
            only_if_in=("status", RunStatus.active()),
        )
    return [None] * len(partials)


_save_partials = db_hop(save_partials_now)
_partials: PerLoop[GroupCommit[tuple[int, str], None]] = PerLoop()


async def save_partial(run_pk: int, text: str) -> None:
    """Checkpoint a run's streaming answer, in one hop with the others waiting then."""
    await _partials.get(lambda: GroupCommit(_save_partials)).submit((run_pk, text))
