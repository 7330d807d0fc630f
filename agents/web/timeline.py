"""A run's trace as a timeline: turns, each with its model call and tools, with durations.

Built from RunEvent rows (types are AgentEventType values; text deltas arrive coalesced).
Unknown entry types still appear, as notes, so the page never hides part of a trace.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

_PREVIEW = 400
_TOOL_END = {"tool_completed": "ok", "tool_failed": "error", "tool_skipped": "skipped"}


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened in a turn."""

    kind: str  # model | tool | note
    label: str  # tool name, "model call", or the event type / custom name
    at: dt.datetime  # when it started
    offset_ms: float  # since the run's first trace entry
    duration_ms: float | None  # None while unfinished or for instantaneous notes
    state: str  # ok | error | skipped | running | "" (notes)
    detail: str  # arguments, a text preview or custom data, for people to read


@dataclass(frozen=True, slots=True)
class Turn:
    """One model call and what followed it until the next (0: before the first model call)."""

    iteration: int
    steps: tuple[Step, ...]
    duration_ms: float


def _ms(start: dt.datetime, end: dt.datetime) -> float:
    return round((end - start).total_seconds() * 1000, 1)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _preview(text: str) -> str:
    return text if len(text) <= _PREVIEW else text[:_PREVIEW] + "…"


@dataclass(slots=True)
class _Open:
    kind: str
    label: str
    at: dt.datetime
    detail: str
    index: int  # position in the turn's step list


def build(events: Sequence[Any]) -> list[Turn]:
    """Group trace entries (objects with seq, type, iteration, at, data) into turns."""
    if not events:
        return []
    origin = min(event.at for event in events)
    steps: dict[int, list[Step | None]] = {}
    open_model: dict[int, _Open] = {}
    open_tools: dict[str, tuple[int, _Open]] = {}
    text: dict[int, list[str]] = {}

    def add(iteration: int, step: Step | None) -> int:
        bucket = steps.setdefault(iteration, [])
        bucket.append(step)
        return len(bucket) - 1

    current = 0  # the latest model call: tool and other events carry no iteration of their own
    for event in sorted(events, key=lambda entry: entry.seq):
        kind = str(event.type).removeprefix("run.")
        data = event.data or {}
        iteration = int(event.iteration or 0) or current
        if kind == "model_started":
            current = iteration
        offset = _ms(origin, event.at)
        if kind in ("text_delta", "reasoning_delta"):
            if data.get("kind", "text") == "text":
                text.setdefault(iteration, []).append(str(data.get("text", "")))
        elif kind == "model_started":
            open_model[iteration] = _Open("model", "model call", event.at, "", add(iteration, None))
        elif kind == "model_completed":
            usage = data.get("usage") or {}
            calls = data.get("tool_calls") or []
            detail = _preview("".join(text.get(iteration, [])))
            if usage:
                detail += f"\n\ntokens in {usage.get('input', 0)}, out {usage.get('output', 0)}"
            if calls:
                detail += "\ncalls " + ", ".join(str(name) for name in calls)
            started = open_model.pop(iteration, None)
            at = started.at if started else event.at
            step = Step(
                "model", "model call", at, _ms(origin, at), _ms(at, event.at), "ok", detail.strip()
            )
            if started:
                steps[iteration][started.index] = step
            else:
                add(iteration, step)
        elif kind == "tool_started":
            label = str(data.get("tool", "tool"))
            detail = _json(data.get("arguments", {}))
            opened = _Open("tool", label, event.at, detail, add(iteration, None))
            open_tools[str(data.get("call_id", ""))] = (iteration, opened)
        elif kind in _TOOL_END:
            call_id = str(data.get("call_id", ""))
            turn, started = open_tools.pop(call_id, (iteration, None))
            at = started.at if started else event.at
            duration = data.get("duration_ms")
            step = Step(
                "tool",
                str(data.get("tool", started.label if started else "tool")),
                at,
                _ms(origin, at),
                float(duration) if duration is not None else _ms(at, event.at),
                _TOOL_END[kind],
                started.detail if started else "",
            )
            if started:
                steps[turn][started.index] = step
            else:
                add(iteration, step)
        else:
            label = str(data.get("name") or kind)
            detail = data.get("data", data) if kind == "custom" else data
            add(
                iteration,
                Step(
                    "note",
                    label,
                    event.at,
                    offset,
                    None,
                    "",
                    _preview(_json(detail)) if detail else "",
                ),
            )

    for iteration, opened in list(open_model.items()) + [
        (turn, opened) for turn, opened in open_tools.values()
    ]:
        steps[iteration][opened.index] = Step(
            opened.kind,
            opened.label,
            opened.at,
            _ms(origin, opened.at),
            None,
            "running",
            opened.detail or _preview("".join(text.get(iteration, []))),
        )
    return [
        _turn(iteration, [s for s in bucket if s is not None])
        for iteration, bucket in sorted(steps.items())
    ]


def _turn(iteration: int, steps: Iterable[Step]) -> Turn:
    ordered = tuple(steps)
    start = min(step.at for step in ordered)
    end = max(step.at + dt.timedelta(milliseconds=step.duration_ms or 0) for step in ordered)
    return Turn(iteration, ordered, _ms(start, end))
