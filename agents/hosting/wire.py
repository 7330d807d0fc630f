"""The wire between hosts, pages, workers and the CLI: group names, frames, replies, Snapshot.

Frames a host sends to ``session.<id>`` (every tab of one chat) carry the run's
``request_id`` and ``seq`` (the run's outward event seq; for coalesced deltas the last one
covered). A ``run.delta`` also carries ``offset``: where its text starts in the answer of its
model call, so a page can tell a lost delta (a gap) from a repeat. Frames to ``monitor`` carry
coalesced run rows. Control requests go to ``control.<session_id>``, which only the hosting
process joins, and are answered on the asker's own channel.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

HOST_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

MONITOR_GROUP = "monitor"
WORKER_CHANNEL = "zett-runs"  # `manage.py runworker zett-runs` consumes new runs from here


def session_group(session_id: str) -> str:
    return f"session.{session_id}"


def control_group(session_id: str) -> str:
    return f"control.{session_id}"


@dataclass(frozen=True, slots=True)
class ControlReply:
    """The explicit answer to one browser action."""

    accepted: bool
    reason: str = ""
    action: str = ""
    request_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "action": self.action,
            "request_id": self.request_id,
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, action: str, request_id: str | None
    ) -> ControlReply:
        return cls(
            bool(data.get("accepted")),
            str(data.get("reason", "")),
            str(data.get("action") or action),
            data.get("request_id") or request_id,
        )


# -- frames to session.<id> --------------------------------------------------------------


class RunStarted(TypedDict):
    type: Literal["run.started"]
    request_id: str
    seq: int
    run: dict[str, Any]
    message: dict[str, Any] | None


class ModelStarted(TypedDict):
    type: Literal["run.model_started"]
    request_id: str
    seq: int
    iteration: int


class Delta(TypedDict):
    type: Literal["run.delta"]
    request_id: str
    seq: int
    first_seq: int
    kind: str  # "text" | "reasoning"
    text: str
    iteration: int
    offset: int  # characters of this kind already sent for this iteration before `text`


class MessageFrame(TypedDict):
    type: Literal["run.message"]
    request_id: str
    seq: int
    message: dict[str, Any]


class ToolFrame(TypedDict):
    type: Literal["run.tool"]
    request_id: str
    seq: int
    status: str
    call: dict[str, Any] | None
    result: dict[str, Any] | None


class CustomFrame(TypedDict):
    type: Literal["run.custom"]
    request_id: str
    seq: int
    name: str
    data: dict[str, Any]


class CompactedFrame(TypedDict):
    """A compaction replaced older messages by a summary: the transcript's divider for it."""

    type: Literal["run.compacted"]
    request_id: str
    seq: int
    divider: dict[
        str, Any
    ]  # payloads.divider_dict: id, role "summary", content, summarized, before


class StateFrame(TypedDict):
    type: Literal["run.state", "run.finished"]
    request_id: str
    seq: int
    run: dict[str, Any]


Frame = (
    RunStarted
    | ModelStarted
    | Delta
    | MessageFrame
    | ToolFrame
    | CustomFrame
    | CompactedFrame
    | StateFrame
)

#: seq of run.finished frames the reaper sends for runs it ends: above any real event's.
REAPED_SEQ = 1 << 30


class MonitorRows(TypedDict):
    type: Literal["monitor.rows"]
    rows: list[dict[str, Any]]


# -- the snapshot ------------------------------------------------------------------------


@dataclass(slots=True)
class Partial:
    """The answer still streaming when a snapshot was taken."""

    request_id: str
    iteration: int
    text: str = ""
    reasoning: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "iteration": self.iteration,
            "text": self.text,
            "reasoning": self.reasoning,
        }


@dataclass(slots=True)
class Snapshot:
    """A chat's transcript plus its active run, consistent with the live frames after ``seq``.

    ``live`` is False when the channel layer could not be reached: the snapshot then comes
    from the database alone and the page shows that live updates are reconnecting.
    """

    messages: list[dict[str, Any]]
    run: dict[str, Any] | None = None
    partial: Partial | None = None
    seq: int = 0  # last seq of the active run this snapshot contains
    persisted_iterations: int = 0  # model calls of the active run whose answer is stored
    live: bool = True
    message_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.message_ids:
            self.message_ids = {m["id"] for m in self.messages}
