"""Log lines operators ship: one per run start and end and per operator action, JSON on request."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.observability import JsonFormatter

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    handler = _Collect()
    loggers = [logging.getLogger("agents.runs"), logging.getLogger("agents.operator")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


async def test_a_run_logs_its_start_and_end_and_an_action_its_outcome_as_json_lines(
    records: list[logging.LogRecord],
    manager: Any,
    user: Any,
    make_profile: Any,
    make_session: Any,
    listen_session: Any,
) -> None:
    profile = await make_profile(slug="echo")
    session = await make_session(user, profile)
    listener = await listen_session(session.id)
    reply = await manager.submit_message(session.id, user, "Hello")
    await listener.finished(reply.request_id)
    await manager.wait_idle()
    refused = await manager.control(session.id, user, "cancel", {})
    assert not refused.accepted

    lines = [json.loads(JsonFormatter().format(record)) for record in records]
    ids = {"session_id": session.id, "user_id": user.pk}
    assert [(line["event"], line["logger"]) for line in lines] == [
        ("run.started", "agents.runs"),
        ("run.finished", "agents.runs"),
        ("operator.action", "agents.operator"),
    ]
    started, finished, action = lines
    assert started.items() >= {**ids, "request_id": reply.request_id, "profile": "Echo"}.items()
    assert (
        finished.items() >= {**ids, "request_id": reply.request_id, "outcome": "completed"}.items()
    )
    assert finished["duration_seconds"] >= 0
    assert action.items() >= {**ids, "action": "cancel", "accepted": False}.items()
    assert action["reason"] == refused.reason
    assert all(line["level"] == "INFO" and line["message"] for line in lines)


def test_zett_log_format_json_switches_the_console_to_json_lines() -> None:
    probe = (
        "from zett_site import settings; "
        "print(settings.LOGGING['handlers']['console']['formatter'])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for value, expected in (("json", "json"), ("", "plain")):
        env["ZETT_LOG_FORMAT"] = value
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected
