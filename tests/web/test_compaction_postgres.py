"""A compaction stored on PostgreSQL survives a restart: a new process restores the summary.

Two processes against one freshly migrated PostgreSQL database: the first runs two turns and
compacts, the second (nothing in memory) runs the next turn from the database alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from agents.extensions.summary_compaction import SummaryCompactionExtension
from agents.models import AgentProfile, ChatSession, Message
from agents.providers.scripted import ScriptedModel
from agents.runtime import Agent, AgentRunConfig
from agents.session_store import DjangoSessionStore

async def main(step):
    if step == "first":
        user = await get_user_model().objects.acreate(username="owner")
        profile = await AgentProfile.objects.acreate(name="P", slug="p", provider="demo")
        session = await ChatSession.objects.acreate(owner=user, profile=profile)
        summariser = SummaryCompactionExtension(
            model=ScriptedModel(["Q1 got A1."]), auto="never", keep_last_messages=2
        )
        agent = Agent(ScriptedModel(["A1", "A2"]), extensions=[DjangoSessionStore(), summariser])
        config = lambda: AgentRunConfig(session_id=str(session.id))
        await agent.run("Q1", config=config())
        await agent.run("Q2", config=config())
        await agent.compact(config=config())
        print(json.dumps({"session": str(session.id)}))
    else:
        model = ScriptedModel(["A3"])
        agent = Agent(model, extensions=[DjangoSessionStore()])
        await agent.run("Q3", config=AgentRunConfig(session_id=sys.argv[2]))
        rows = [
            [m.content, m.summarized_by_id is not None]
            async for m in Message.objects.filter(session_id=sys.argv[2]).order_by("seq")
        ]
        sent = [[m.role, m.content] for m in model.requests[-1].messages if m.role != "system"]
        print(json.dumps({"sent": sent, "rows": rows}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture
def database(postgres_process_env: dict[str, str]) -> dict[str, str]:
    return postgres_process_env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_stored_compaction_is_restored_by_a_new_process(database: dict[str, str]) -> None:
    first = _run(["-c", SCRIPT, "first"], database)
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout.strip().splitlines()[-1])["session"]

    second = _run(["-c", SCRIPT, "second", session], database)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout.strip().splitlines()[-1])

    summary = "Summary of the earlier conversation:\nQ1 got A1."
    assert result["sent"] == [
        ["user", summary],
        ["user", "Q2"],
        ["assistant", "A2"],
        ["user", "Q3"],
    ]
    # Nothing deleted: the originals stay, marked as summarised.
    assert result["rows"] == [
        ["Q1", True],
        ["A1", True],
        ["Q2", False],
        ["A2", False],
        [summary, False],
        ["Q3", False],
        ["A3", False],
    ]
