"""RunProjection: what one agent event means for the Run row, its trace and the pages. Pure.

``apply(event)`` updates the in-memory Run (no database here), appends RunEvent trace
entries to be written, and returns a Step: the frames to send and whether (and with which
session status) the row must be checkpointed now. Text deltas are coalesced into one trace
entry per stretch of one kind and carry the character offset they start at.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..models import CancelState, Run, RunEvent, RunStatus, SessionStatus
from ..runtime import AgentEvent, AgentEventType
from ..runtime.operator import OperatorProtocol
from ..runtime.pricing import TokenPrices, tokens_of_chars
from .payloads import call_dict, divider_dict, message_dict
from .wire import Frame

ET = AgentEventType

#: Every Run field the projection may change; the final write saves all of them.
RUN_FIELDS = (
    "status",
    "phase",
    "cancel_state",
    "current_tool",
    "waiting_for",
    "iterations",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost",
    "cost_currency",
    "error",
    "partial_text",
    "finished_at",
)

_TOOL_STATUS = {
    ET.TOOL_COMPLETED: "completed",
    ET.TOOL_FAILED: "failed",
    ET.TOOL_SKIPPED: "skipped",
}


@dataclass(slots=True)
class Step:
    """What applying one event asks of the host."""

    frames: list[Frame] = field(default_factory=list)
    fields: set[str] = field(default_factory=set)
    session_status: str | None = None
    checkpoint: bool = False


@dataclass(eq=False)
class RunProjection:
    run: Run
    protocol: OperatorProtocol
    row: Callable[[], dict[str, Any]]  # the run's monitor row (names from the session)
    prices: TokenPrices | None = None  # the model's prices when the run started; None: unpriced
    # Prices of the other models the run's extensions call (a summary model), by
    # (provider, model name); a model missing here is unpriced.
    other_prices: dict[tuple[str, str], TokenPrices | None] = field(default_factory=dict)
    seq: int = 0  # last outward seq applied
    iteration: int = 0
    text: list[str] = field(default_factory=list)  # the answer streaming in this iteration
    reasoning: list[str] = field(default_factory=list)
    text_chars: int = 0
    reasoning_chars: int = 0
    answered_iterations: int = 0  # model calls whose answer message arrived
    trace: list[RunEvent] = field(default_factory=list)  # not yet written
    input_message: dict[str, Any] | None = None
    compaction: dict[str, Any] | None = None  # the last COMPACTION_COMPLETED's data, if any
    dirty: bool = True  # the monitor row changed since the monitor last took it
    _pending_delta: RunEvent | None = None
    _pending_parts: list[str] = field(default_factory=list)
    _tool_started: dict[str, float] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        return self.run.request_id

    @property
    def live_output_estimate(self) -> int:
        """Output tokens of the call streaming now, estimated from its deltas (0 when none).

        The provider's usage replaces it when the call completes.
        """
        if self.answered_iterations >= self.iteration:
            return 0
        return tokens_of_chars(self.text_chars + self.reasoning_chars)

    @property
    def partial(self) -> tuple[str, str]:
        """The text and reasoning of the answer streaming now ("" when it is stored)."""
        if self.answered_iterations >= self.iteration:
            return "", ""
        return "".join(self.text), "".join(self.reasoning)

    # -- events ------------------------------------------------------------------------

    def apply(self, event: AgentEvent) -> Step:
        self.seq = event.seq
        kind = event.type
        if kind is ET.TEXT_DELTA or kind is ET.REASONING_DELTA:
            return self._delta(event)
        if kind is ET.TOOL_CALL_DELTA:
            return Step()  # the completed assistant message carries the assembled calls
        self.flush_delta()
        run = self.run
        step = Step(fields={"phase", "iterations"}, checkpoint=True)
        phase_changed = run.phase != event.phase.value
        run.phase = event.phase.value
        data: dict[str, Any] = {}
        base = {"request_id": self.request_id, "seq": event.seq}
        if kind is ET.RUN_STARTED:
            if event.message is not None:
                self.input_message = message_dict(event.message, request_id=self.request_id)
                step.frames.append(
                    {
                        "type": "run.started",
                        **base,
                        "run": self.row(),
                        "message": self.input_message,
                    }
                )
            step.checkpoint = False
        elif kind is ET.MODEL_STARTED:
            self.iteration = run.iterations = event.iteration
            self.text.clear()
            self.reasoning.clear()
            self.text_chars = self.reasoning_chars = 0
            step.frames.append({"type": "run.model_started", **base, "iteration": event.iteration})
            # Checkpointed: a monitor or run page opened during a long model call reads the
            # row and the trace from the database, and must see this call, not "created".
        elif kind is ET.MODEL_COMPLETED:
            self._count(event.usage, step, data, self.prices)
            if event.message is not None:
                self.answered_iterations = self.iteration
                if run.partial_text:
                    run.partial_text = ""
                    step.fields.add("partial_text")
                data["tool_calls"] = [c.name for c in getattr(event.message, "tool_calls", ())]
                step.frames.append(
                    {
                        "type": "run.message",
                        **base,
                        "message": message_dict(event.message, request_id=self.request_id),
                    }
                )
        elif kind is ET.TOOL_STARTED and event.tool_call is not None:
            call = event.tool_call
            run.current_tool = call.name
            self._tool_started[call.id] = time.monotonic()
            step.fields.add("current_tool")
            data = {"tool": call.name, "call_id": call.id, "arguments": call.arguments}
            step.frames.append(
                {
                    "type": "run.tool",
                    **base,
                    "status": "started",
                    "call": call_dict(call),
                    "result": None,
                }
            )
        elif kind in _TOOL_STATUS:
            status = _TOOL_STATUS[kind]
            call = event.tool_call
            run.current_tool = ""
            step.fields.add("current_tool")
            if call is not None:
                data = self._tool_ended(call.name, call.id, status)
                if self._drop_wait(call.id):
                    step.fields.add("waiting_for")
            result = (
                message_dict(event.message, request_id=self.request_id)
                if event.message is not None
                else None
            )
            step.frames.append(
                {
                    "type": "run.tool",
                    **base,
                    "status": status,
                    "call": call_dict(call) if call else None,
                    "result": result,
                }
            )
        elif kind is ET.STEERING_STARTED:
            if event.message is not None:
                data = {"text": event.message.content}
                step.frames.append(
                    {
                        "type": "run.message",
                        **base,
                        "message": message_dict(event.message, request_id=self.request_id),
                    }
                )
        elif kind is ET.CUSTOM:
            payload = dict(event.data)
            data = {"name": event.name, "data": payload}
            waiting = list(run.waiting_for or [])
            if self.protocol.apply_wait(waiting, event.name or "", payload):
                run.waiting_for = waiting
                step.fields.add("waiting_for")
            step.frames.append(
                {"type": "run.custom", **base, "name": event.name or "", "data": payload}
            )
        elif kind is ET.COMPACTION_COMPLETED:
            result = dict(event.data)
            self.compaction = result
            data = {
                k: result[k] for k in ("compacted", "summarized", "kept", "error") if k in result
            }
            own = result.get("summary_model")
            prices = self.other_prices.get(tuple(own)) if own else self.prices
            self._count(event.usage, step, data, prices)
            if result.get("compacted") and result.get("summary_id"):
                step.frames.append(
                    {
                        "type": "run.compacted",
                        **base,
                        "divider": divider_dict(
                            str(result["summary_id"]),
                            str(result.get("summary", "")),
                            int(result.get("summarized") or 0),
                            self.request_id,
                            result.get("kept_first_id"),
                        ),
                    }
                )
        elif kind is ET.RUN_COMPLETED:
            step.checkpoint = False  # finish() writes the final state
        self._follow_waiting(step)
        self.trace.append(
            RunEvent(
                run=run,
                seq=event.seq,
                last_seq=event.seq,
                type=kind.value,
                phase=event.phase.value,
                iteration=event.iteration,
                data=data,
            )
        )
        self.dirty = True
        if phase_changed or step.fields & {"waiting_for", "status"} or kind is ET.TOOL_STARTED:
            step.frames.append({"type": "run.state", **base, "run": self.row()})
        return step

    def _count(
        self, usage: Any, step: Step, data: dict[str, Any], prices: TokenPrices | None
    ) -> None:
        """Add one model call's usage (an answer's or a summary's) to the run, priced.

        ``prices`` are those of the model that made the call (None: unpriced).
        """
        if usage is None:
            return
        run = self.run
        run.input_tokens += usage.input_tokens
        run.output_tokens += usage.output_tokens
        run.cache_read_tokens += usage.cache_read_tokens or 0
        run.cache_write_tokens += usage.cache_write_tokens or 0
        run.reasoning_tokens += usage.reasoning_tokens or 0
        step.fields |= {
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
        }
        if prices is not None:
            run.cost = (run.cost or Decimal(0)) + prices.cost(usage)
            run.cost_currency = prices.currency
            step.fields |= {"cost", "cost_currency"}
        self.dirty = True
        data["usage"] = {"input": usage.input_tokens, "output": usage.output_tokens}

    def _delta(self, event: AgentEvent) -> Step:
        text_kind = "text" if event.type is ET.TEXT_DELTA else "reasoning"
        delta = event.delta or ""
        if text_kind == "text":
            offset = self.text_chars
            self.text.append(delta)
            self.text_chars += len(delta)
        else:
            offset = self.reasoning_chars
            self.reasoning.append(delta)
            self.reasoning_chars += len(delta)
        self.dirty = True  # the live usage estimate moved
        self._trace_delta(event, text_kind, delta)
        return Step(
            frames=[
                {
                    "type": "run.delta",
                    "request_id": self.request_id,
                    "seq": event.seq,
                    "first_seq": event.seq,
                    "kind": text_kind,
                    "text": delta,
                    "iteration": event.iteration,
                    "offset": offset,
                }
            ]
        )

    def _trace_delta(self, event: AgentEvent, text_kind: str, delta: str) -> None:
        entry = self._pending_delta
        if entry is None or entry.data.get("kind") != text_kind:
            self.flush_delta()
            entry = RunEvent(
                run=self.run,
                seq=event.seq,
                last_seq=event.seq,
                type=event.type.value,
                phase=event.phase.value,
                iteration=event.iteration,
                data={"kind": text_kind, "text": "", "count": 0},
            )
            self._pending_delta = entry
            self._pending_parts = []
        entry.last_seq = event.seq
        # Joined once at flush: += on the growing text made long answers quadratic.
        self._pending_parts.append(delta)

    def flush_delta(self) -> None:
        entry = self._pending_delta
        if entry is not None:
            entry.data["text"] = "".join(self._pending_parts)
            entry.data["count"] = len(self._pending_parts)
            self.trace.append(entry)
            self._pending_delta = None
            self._pending_parts = []

    def _tool_ended(self, name: str, call_id: str, status: str) -> dict[str, Any]:
        data: dict[str, Any] = {"tool": name, "call_id": call_id, "status": status}
        started = self._tool_started.pop(call_id, None)
        if started is not None:
            data["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
        return data

    def _drop_wait(self, call_id: str) -> bool:
        waiting = self.run.waiting_for or []
        kept = [item for item in waiting if item.get("id") != call_id]
        if len(kept) != len(waiting):
            self.run.waiting_for = kept
            return True
        return False

    def _follow_waiting(self, step: Step) -> None:
        run = self.run
        wanted = RunStatus.WAITING if run.waiting_for else RunStatus.RUNNING
        if run.status != wanted and run.status in (RunStatus.RUNNING, RunStatus.WAITING):
            run.status = wanted
            step.fields.add("status")
            step.session_status = (
                SessionStatus.WAITING if wanted == RunStatus.WAITING else SessionStatus.RUNNING
            )
            step.checkpoint = True

    # -- the host's own changes ----------------------------------------------------------

    def state_frame(self) -> Frame:
        self.dirty = True
        return {
            "type": "run.state",
            "request_id": self.request_id,
            "seq": self.seq,
            "run": self.row(),
        }

    def finish(self, status: str, finished_at: Any) -> Frame:
        """Set the final fields; the returned run.finished frame follows every other."""
        self.flush_delta()
        run = self.run
        run.status = status
        run.phase = {RunStatus.COMPLETED: "completed", RunStatus.CANCELLED: "cancelled"}.get(
            status, "failed"
        )
        if run.cancel_state in (CancelState.REQUESTED, CancelState.ACKNOWLEDGED):
            run.cancel_state = CancelState.STOPPED
        run.current_tool = ""
        run.waiting_for = []
        run.partial_text = ""
        run.finished_at = finished_at
        self.dirty = True
        return {
            "type": "run.finished",
            "request_id": self.request_id,
            "seq": self.seq + 1,
            "run": self.row(),
        }
