"""RunProjection: what a list of agent events means for the Run row, its trace and the frames.

No database: the Run is an unsaved model instance and the events are built directly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from agents.hosting.payloads import run_row
from agents.hosting.projection import RunProjection, Step
from agents.models import CancelState, Run, RunStatus, SessionStatus
from agents.runtime import (
    AgentEvent,
    AgentEventType,
    AgentPhase,
    AssistantMessage,
    ModelUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agents.runtime.operator import OperatorProtocol, WaitSpec
from agents.runtime.pricing import TokenPrices

ET = AgentEventType
REQUEST = "req-projection"

QUESTION = WaitSpec("question", "quiz.asked", frozenset({"quiz.answered"}), fields=("text",))


class Events:
    """Builds one request's events with consecutive seq numbers, as the runtime stamps them."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: AgentEventType, phase: AgentPhase, **fields: Any) -> AgentEvent:
        self.seq += 1
        return AgentEvent(
            kind, session_id="s", request_id=REQUEST, seq=self.seq, phase=phase, **fields
        )


def _projection(*waits: WaitSpec) -> RunProjection:
    run = Run(request_id=REQUEST, input_text="hi", status=RunStatus.RUNNING)
    return RunProjection(run, OperatorProtocol({}, waits), lambda: run_row(run))


def _apply_all(projection: RunProjection, events: list[AgentEvent]) -> list[Step]:
    return [projection.apply(event) for event in events]


def _frames(steps: list[Step], kind: str) -> list[dict[str, Any]]:
    return [dict(frame) for step in steps for frame in step.frames if frame["type"] == kind]


G = AgentPhase.GENERATING


def test_deltas_carry_the_offset_where_their_text_starts_per_kind_and_model_call() -> None:
    projection = _projection()
    ev = Events()
    steps = _apply_all(
        projection,
        [
            ev(ET.RUN_STARTED, AgentPhase.READY, message=UserMessage("hi")),
            ev(ET.MODEL_STARTED, G, iteration=1),
            ev(ET.REASONING_DELTA, G, delta="hmm", iteration=1),
            ev(ET.TEXT_DELTA, G, delta="Hel", iteration=1),
            ev(ET.TEXT_DELTA, G, delta="lo", iteration=1),
            ev(ET.MODEL_STARTED, G, iteration=2),
            ev(ET.TEXT_DELTA, G, delta="Again", iteration=2),
        ],
    )
    deltas = [
        (f["kind"], f["text"], f["offset"], f["iteration"]) for f in _frames(steps, "run.delta")
    ]
    assert deltas == [
        ("reasoning", "hmm", 0, 1),
        ("text", "Hel", 0, 1),
        ("text", "lo", 3, 1),
        ("text", "Again", 0, 2),  # a new model call starts a new answer
    ]
    assert [f["seq"] for f in _frames(steps, "run.delta")] == [3, 4, 5, 7]
    assert all(not step.checkpoint for step in steps[2:5]), "a delta must not cost a write"


def test_a_stretch_of_deltas_becomes_one_trace_entry_with_its_seq_range() -> None:
    projection = _projection()
    ev = Events()
    answer = AssistantMessage("Hello!")
    _apply_all(
        projection,
        [
            ev(ET.MODEL_STARTED, G, iteration=1),
            ev(ET.TEXT_DELTA, G, delta="Hel", iteration=1),
            ev(ET.TEXT_DELTA, G, delta="lo", iteration=1),
            ev(ET.TEXT_DELTA, G, delta="!", iteration=1),
            ev(ET.REASONING_DELTA, G, delta="so", iteration=1),
            ev(ET.MODEL_COMPLETED, G, message=answer, iteration=1),
        ],
    )
    trace = [(e.type, e.seq, e.last_seq, e.data) for e in projection.trace]
    assert trace == [
        ("model_started", 1, 1, {}),
        ("text_delta", 2, 4, {"kind": "text", "text": "Hello!", "count": 3}),
        ("reasoning_delta", 5, 5, {"kind": "reasoning", "text": "so", "count": 1}),
        ("model_completed", 6, 6, {"tool_calls": []}),
    ]


def test_a_wait_the_protocol_declares_opens_and_closes_and_the_status_follows() -> None:
    projection = _projection(QUESTION)
    run = projection.run
    ev = Events()
    opened = projection.apply(
        ev(ET.CUSTOM, AgentPhase.RUNNING_TOOL, name="quiz.asked", data={"id": "q1", "text": "Why?"})
    )
    assert run.waiting_for == [{"kind": "question", "id": "q1", "text": "Why?"}]
    assert run.status == RunStatus.WAITING
    assert opened.checkpoint and {"waiting_for", "status"} <= opened.fields
    assert opened.session_status == SessionStatus.WAITING
    states = [f for f in opened.frames if f["type"] == "run.state"]
    assert states and states[-1]["run"]["status"] == "waiting"
    assert states[-1]["run"]["waiting_for"] == run.waiting_for

    closed = projection.apply(
        ev(ET.CUSTOM, AgentPhase.RUNNING_TOOL, name="quiz.answered", data={"id": "q1"})
    )
    assert run.waiting_for == []
    assert run.status == RunStatus.RUNNING
    assert closed.session_status == SessionStatus.RUNNING
    assert [f["run"]["status"] for f in closed.frames if f["type"] == "run.state"] == ["running"]


def test_a_custom_event_no_protocol_declares_changes_no_wait() -> None:
    projection = _projection(QUESTION)
    step = projection.apply(
        Events()(ET.CUSTOM, AgentPhase.RUNNING_TOOL, name="other.asked", data={"id": "x"})
    )
    assert projection.run.waiting_for == []
    assert projection.run.status == RunStatus.RUNNING
    assert "waiting_for" not in step.fields
    assert [f["type"] for f in step.frames] == ["run.custom", "run.state"]  # the phase changed


def test_a_tool_call_is_timed_shown_and_closes_the_wait_keyed_by_its_call_id() -> None:
    approval = WaitSpec("approval", "gate.requested", frozenset({"gate.resolved"}))
    projection = _projection(approval)
    run = projection.run
    ev = Events()
    call = ToolCall("call-1", "calculator", {"expression": "1+1"})
    tool = AgentPhase.RUNNING_TOOL
    started = projection.apply(ev(ET.TOOL_STARTED, tool, tool_call=call))
    assert run.current_tool == "calculator"
    assert [f["type"] for f in started.frames] == ["run.tool", "run.state"]
    projection.apply(ev(ET.CUSTOM, tool, name="gate.requested", data={"id": "call-1"}))
    assert run.status == RunStatus.WAITING
    result = ToolMessage("call-1", "calculator", "2")
    ended = projection.apply(ev(ET.TOOL_COMPLETED, tool, tool_call=call, message=result))
    assert run.current_tool == ""
    assert run.waiting_for == [] and run.status == RunStatus.RUNNING
    tool_frames = [f for f in ended.frames if f["type"] == "run.tool"]
    assert tool_frames[0]["status"] == "completed"
    assert tool_frames[0]["result"]["content"] == "2"
    data = projection.trace[-1].data
    assert data["status"] == "completed" and data["call_id"] == "call-1"
    assert isinstance(data["duration_ms"], float) and data["duration_ms"] >= 0


def test_usage_adds_up_over_model_calls() -> None:
    projection = _projection()
    ev = Events()
    for iteration in (1, 2):
        projection.apply(ev(ET.MODEL_STARTED, G, iteration=iteration))
        projection.apply(
            ev(
                ET.MODEL_COMPLETED,
                G,
                iteration=iteration,
                message=AssistantMessage("x"),
                usage=ModelUsage(10, 3),
            )
        )
    assert (projection.run.input_tokens, projection.run.output_tokens) == (20, 6)
    assert projection.run.iterations == 2


def test_partial_is_the_streaming_answer_until_its_message_arrives() -> None:
    projection = _projection()
    ev = Events()
    projection.apply(ev(ET.MODEL_STARTED, G, iteration=1))
    projection.apply(ev(ET.REASONING_DELTA, G, delta="think", iteration=1))
    projection.apply(ev(ET.TEXT_DELTA, G, delta="Par", iteration=1))
    projection.apply(ev(ET.TEXT_DELTA, G, delta="tial", iteration=1))
    assert projection.partial == ("Partial", "think")
    projection.run.partial_text = "Par"  # as a checkpoint saved it
    done = projection.apply(ev(ET.MODEL_COMPLETED, G, iteration=1, message=AssistantMessage("x")))
    assert projection.partial == ("", "")
    assert projection.run.partial_text == "" and "partial_text" in done.fields
    projection.apply(ev(ET.MODEL_STARTED, G, iteration=2))
    projection.apply(ev(ET.TEXT_DELTA, G, delta="Next", iteration=2))
    assert projection.partial == ("Next", "")


def test_finish_sets_the_final_fields_and_follows_every_other_frame() -> None:
    projection = _projection(QUESTION)
    run = projection.run
    ev = Events()
    projection.apply(ev(ET.TOOL_STARTED, AgentPhase.RUNNING_TOOL, tool_call=ToolCall("c", "t", {})))
    projection.apply(
        ev(ET.CUSTOM, AgentPhase.RUNNING_TOOL, name="quiz.asked", data={"id": "q", "text": "?"})
    )
    projection.apply(ev(ET.MODEL_STARTED, G, iteration=1))
    projection.apply(ev(ET.TEXT_DELTA, G, delta="cut", iteration=1))
    run.cancel_state = CancelState.ACKNOWLEDGED
    run.partial_text = "cu"
    finished_at = datetime(2026, 1, 2, tzinfo=UTC)
    frame = projection.finish(RunStatus.CANCELLED, finished_at)
    assert (run.status, run.phase, run.cancel_state) == ("cancelled", "cancelled", "stopped")
    assert (run.current_tool, run.waiting_for, run.partial_text) == ("", [], "")
    assert run.finished_at == finished_at
    assert frame["run"]["finished_at"] == finished_at.timestamp()
    assert frame["type"] == "run.finished" and frame["seq"] == ev.seq + 1
    assert frame["run"]["status"] == "cancelled"
    # The pending delta stretch was written to the trace, not dropped.
    assert projection.trace[-1].data == {"kind": "text", "text": "cut", "count": 1}


def test_finish_maps_every_other_status_to_the_failed_phase() -> None:
    for status, phase in [
        (RunStatus.COMPLETED, "completed"),
        (RunStatus.FAILED, "failed"),
        (RunStatus.INTERRUPTED, "failed"),
    ]:
        projection = _projection()
        projection.finish(status, None)
        assert (projection.run.status, projection.run.phase) == (status, phase)
        assert projection.run.cancel_state == CancelState.NONE  # nobody asked to cancel


def test_live_usage_is_an_estimate_while_streaming_then_the_providers_usage() -> None:
    from decimal import Decimal

    from agents.runtime.pricing import TokenPrices

    run = Run(request_id=REQUEST, input_text="hi", status=RunStatus.RUNNING)
    projection = RunProjection(
        run,
        OperatorProtocol({}, ()),
        lambda: run_row(run, estimate=projection.live_output_estimate),
    )
    projection.prices = TokenPrices(input=Decimal(1), output=Decimal(10))
    ev = Events()
    projection.apply(ev(ET.MODEL_STARTED, G, iteration=1))
    projection.dirty = False
    projection.apply(ev(ET.TEXT_DELTA, G, delta="x" * 40, iteration=1))
    live = projection.row()["usage"]
    # 40 characters stream: about 10 tokens, marked as an estimate, and the monitor row moved.
    assert projection.dirty and live["estimated"] and live["output_tokens"] == 10
    assert live["label"].startswith("≈ 10 tokens")

    answer = AssistantMessage("x" * 40)
    usage = ModelUsage(input_tokens=100, output_tokens=7, cache_read_tokens=40)
    step = projection.apply(ev(ET.MODEL_COMPLETED, G, message=answer, iteration=1, usage=usage))
    final = projection.row()["usage"]
    assert not final["estimated"] and (final["output_tokens"], final["cache_read_tokens"]) == (
        7,
        40,
    )
    assert run.cost == Decimal("0.00017") and {"cost", "cache_read_tokens"} <= step.fields


def test_the_monitor_row_shows_the_estimate_with_its_mark_and_then_the_cost() -> None:
    from decimal import Decimal

    from agents.web.monitor_row import monitor_row

    run = Run(request_id=REQUEST, session_id="s", input_text="hi", status=RunStatus.RUNNING)
    live = monitor_row(run_row(run, estimate=12))
    assert "≈ 12 tokens · no price set" in live
    run.status, run.input_tokens, run.output_tokens = RunStatus.COMPLETED, 100, 20
    run.cost, run.cost_currency = Decimal("0.00123"), "USD"
    done = monitor_row(run_row(run))
    assert "120 tokens · $0.0012" in done and "≈" not in done


def test_a_completed_compaction_counts_its_usage_at_the_price_and_sends_the_divider() -> None:
    events = Events()
    projection = _projection()
    projection.prices = TokenPrices(input=Decimal(2), output=Decimal(4), currency="USD")
    compacting = AgentPhase.COMPACTING
    data = {
        "compacted": True,
        "summarized": 3,
        "kept": 2,
        "summary": "the gist",
        "summary_id": "sum-1",
        "kept_first_id": "msg-4",
    }
    steps = _apply_all(
        projection,
        [
            events(ET.COMPACTION_STARTED, compacting),
            events(
                ET.COMPACTION_COMPLETED,
                compacting,
                data=data,
                usage=ModelUsage(input_tokens=1_000_000, output_tokens=500_000),
            ),
        ],
    )

    run = projection.run
    assert (run.input_tokens, run.output_tokens) == (1_000_000, 500_000)
    assert run.cost == Decimal(4) and run.cost_currency == "USD"
    [frame] = _frames(steps, "run.compacted")
    assert frame["divider"] == {
        "id": "sum-1",
        "role": "summary",
        "content": "the gist",
        "summarized": 3,
        "before": "msg-4",
        "request_id": REQUEST,
        "attributes": {},
        "tool_calls": [],
    }
    assert projection.compaction == data
    assert (
        projection.trace[-1].data["summarized"] == 3 and "summary" not in projection.trace[-1].data
    )


def test_a_failed_compaction_sends_no_divider() -> None:
    events = Events()
    projection = _projection()
    failed = {"compacted": False, "error": "RuntimeError: down"}
    steps = _apply_all(
        projection,
        [
            events(ET.COMPACTION_STARTED, AgentPhase.COMPACTING),
            events(ET.COMPACTION_COMPLETED, AgentPhase.COMPACTING, data=failed),
        ],
    )

    assert _frames(steps, "run.compacted") == []
    assert projection.compaction == failed
