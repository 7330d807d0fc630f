"""Read-only database queries shared by pages and sockets: sessions, transcripts, run rows.

All sync ORM; consumers call them through database_sync_to_async.
"""

from __future__ import annotations

from typing import Any

from ..hosting import message_dict, run_row
from ..models import ChatSession, Message, Run, RunStatus

RECENT_RUNS = 20


def session_owner(session_id: str) -> tuple[bool, int | None]:
    """(exists, owner id) of a session."""
    owner = ChatSession.objects.filter(pk=session_id).values_list("owner_id", flat=True).first()
    return owner is not None, owner


def transcript(session: ChatSession) -> list[dict[str, Any]]:
    """The persisted messages of a session as browser dicts, in order."""
    rows = Message.objects.filter(session=session).select_related("run").order_by("seq")
    return [message_dict(row, request_id=row.run.request_id if row.run else None) for row in rows]


def row(run: Run) -> dict[str, Any]:
    """A run's monitor row; expects session__owner, session__profile and profile selected."""
    session = run.session
    return run_row(
        run,
        owner=session.owner.get_username(),
        profile=run.profile.name if run.profile else session.profile.name,
        title=str(session),
    )


def runs_with_names() -> Any:
    return Run.objects.select_related("session__owner", "session__profile", "profile")


def monitor_runs(recent: int = RECENT_RUNS) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of every active run (oldest first) and of the most recently finished ones."""
    runs = runs_with_names()
    active = runs.filter(status__in=RunStatus.active()).order_by("created_at")
    finished = runs.exclude(status__in=RunStatus.active()).order_by("-finished_at", "-created_at")
    return [row(run) for run in active], [row(run) for run in finished[:recent]]
