"""Read-only database queries shared by pages and sockets: sessions, transcripts, run rows.

All sync ORM; consumers call them through database_sync_to_async.
"""

from __future__ import annotations

from typing import Any

from ..hosting import run_row_of, session_transcript
from ..models import ChatSession, Run, RunStatus

RECENT_RUNS = 20


def session_owner(session_id: str) -> tuple[bool, int | None]:
    """(exists, owner id) of a session."""
    owner = ChatSession.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
    return owner is not None, owner


def transcript(session: ChatSession) -> list[dict[str, Any]]:
    """The persisted messages of a session as browser dicts, in order, with run notices."""
    return session_transcript(session.pk)


def row(run: Run) -> dict[str, Any]:
    """A run's monitor row; expects session__owner, session__profile and profile selected."""
    return run_row_of(run)


def run_row_by_request(request_id: str) -> dict[str, Any] | None:
    run = runs_with_names().filter(request_id=request_id).first()
    return row(run) if run is not None else None


def latest_run_row(session_id: str) -> dict[str, Any] | None:
    """The row of the session's most recent run, finished or not."""
    run = runs_with_names().filter(session_id=session_id).order_by("-created_at").first()
    return row(run) if run is not None else None


def runs_with_names() -> Any:
    return Run.objects.select_related("session__owner", "session__profile", "profile")


def monitor_runs(recent: int = RECENT_RUNS) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of every active run (oldest first) and of the most recently finished ones."""
    runs = runs_with_names()
    active = runs.filter(status__in=RunStatus.active()).order_by("created_at")
    finished = runs.exclude(status__in=RunStatus.active()).order_by("-finished_at", "-created_at")
    return [row(run) for run in active], [row(run) for run in finished[:recent]]
