"""The snapshot: a chat's transcript and active run, consistent with the live frames after it.

A tab joins its session group first and takes the snapshot second, so frames published in
between wait in its channel and are filtered against ``Snapshot.seq``. The streaming answer
comes from the hosting process: this one, or another asked over the control bus. When the
channel layer is away the snapshot comes from the database alone (``live=False``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from . import db
from .control_bus import LayerUnavailable
from .run import HostedRun
from .wire import Partial, Snapshot

Ask = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any] | None]]


def local_part(hosted: HostedRun) -> dict[str, Any]:
    """What a hosting process tells a snapshot taken elsewhere."""
    seq, partial, started = hosted.partial()
    return {
        "run": hosted.row(),
        "seq": seq,
        "partial": partial.as_dict() if partial else None,
        "input": started,
    }


async def build_snapshot(
    session_id: str, hosted: HostedRun | None, ask: Ask, timeout: float, *, live: bool = True
) -> Snapshot:
    part: dict[str, Any] | None = None
    if hosted is not None and not hosted.done.is_set():
        part = local_part(hosted)
    else:
        active = await db.active_run(session_id)
        if active is not None and live:
            try:
                reply = await ask(session_id, {"action": "snapshot"}, timeout)
            except LayerUnavailable:
                reply, live = None, False
            # No reply (the host is busy, or re-joining after an outage): the stored
            # transcript and the run's row still show, without the streaming answer.
            part = (reply or {}).get("snapshot")
    messages = await db.transcript(session_id)
    snap = Snapshot(messages=messages, live=live)
    if part is not None:
        run = part["run"]
        snap.run = run
        snap.seq = int(part["seq"])
        started = part.get("input")
        if started is not None and started["id"] not in snap.message_ids:
            messages.append(started)
            snap.message_ids.add(started["id"])
        assistant_rows = sum(
            1
            for m in messages
            if m.get("request_id") == run["request_id"] and m.get("role") == "assistant"
        )
        # The model calls whose answers the transcript already holds: their late deltas
        # (seq above the snapshot's when an answer completed between our two reads) must
        # not reopen a streaming bubble.
        snap.persisted_iterations = assistant_rows
        streaming = part.get("partial")
        if streaming and assistant_rows < int(streaming["iteration"]):
            snap.partial = Partial(**streaming)
    if snap.run is None:
        latest = await db.active_run(session_id)
        if latest is not None:
            snap.run = await db.row_for(latest)
    return snap
