"""The run page's timeline, built from the trace of a real run: each tool under its turn."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agents.models import Run
from agents.web import timeline

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})


@sync_to_async
def _turns(request_id: str) -> list[timeline.Turn]:
    run = Run.objects.get(request_id=request_id)
    return timeline.build(list(run.events.order_by("seq")))


async def test_a_tool_call_is_filed_under_the_turn_whose_model_call_asked_for_it(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)
    reply = await manager.submit_message(session.id, user, "What is 6 * 7?")
    await manager.wait_for_run(reply.request_id)

    turns = await _turns(reply.request_id)
    kinds = {turn.iteration: [(step.kind, step.label) for step in turn.steps] for turn in turns}
    assert [kind for kind, _ in kinds[1]] == ["model", "tool"]
    assert kinds[1][1][1] == "calculator"
    assert [kind for kind, _ in kinds[2] if kind != "note"] == ["model"]  # + run_completed
    assert all(kind != "tool" for kind, _ in kinds.get(0, []))
    first = next(turn for turn in turns if turn.iteration == 1)
    tool = first.steps[1]
    assert tool.state == "ok" and tool.duration_ms is not None
    # The turn lasts from its model call to the end of its tool, not from the run's start.
    assert first.duration_ms >= tool.offset_ms - first.steps[0].offset_ms
