"""Structured log lines: one per run start and end and per operator action.

Each line carries the session, run and user ids as fields of the record (``extra``), so
the plain format shows them in the message and ``JsonFormatter`` (chosen with
``ZETT_LOG_FORMAT=json``) writes them as keys of one JSON object per line.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

runs_log = logging.getLogger("agents.runs")
actions_log = logging.getLogger("agents.operator")

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def log_run_started(profile: str, session_id: str, request_id: str, user_id: Any) -> None:
    runs_log.info(
        "run %s started in session %s (profile %s, user %s)",
        request_id,
        session_id,
        profile,
        user_id,
        extra={
            "event": "run.started",
            "session_id": session_id,
            "request_id": request_id,
            "user_id": user_id,
            "profile": profile,
        },
    )


def log_run_finished(
    profile: str,
    session_id: str,
    request_id: str,
    user_id: Any,
    outcome: str,
    duration: float,
    error: str = "",
) -> None:
    runs_log.info(
        "run %s %s after %.3f s%s",
        request_id,
        outcome,
        duration,
        f": {error}" if error else "",
        extra={
            "event": "run.finished",
            "session_id": session_id,
            "request_id": request_id,
            "user_id": user_id,
            "profile": profile,
            "outcome": outcome,
            "duration_seconds": round(duration, 6),
            "error": error,
        },
    )


def log_operator_action(
    session_id: str, request_id: str, user_id: Any, action: str, accepted: bool, reason: str
) -> None:
    actions_log.info(
        "operator action %s on session %s by user %s: %s%s",
        action,
        session_id,
        user_id,
        "accepted" if accepted else "refused",
        f" ({reason})" if reason else "",
        extra={
            "event": "operator.action",
            "session_id": session_id,
            "request_id": request_id,
            "user_id": user_id,
            "action": action,
            "accepted": accepted,
            "reason": reason,
        },
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, process and the extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
