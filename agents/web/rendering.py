"""HTML for the browser: the htmx fragments sockets send and the pages include.

Model output is untrusted: message content is rendered by ``markup`` (markdown without raw
HTML, then an allow-list); everything else reaches the page through auto-escaping Django
templates, but for the monitor's row and the chat's status bar, which ``monitor_row`` and
``run_status`` build in Python and escape value by value (they are the hottest fragments).
Streaming deltas are escaped text only. Every fragment a socket sends is a sequence of
top-level elements the htmx ws extension swaps out of band (by id or by hx-swap-oob).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape

from ..hosting import Snapshot
from . import wording
from .items import (
    TERMINAL_STATUSES,
    approval_calls,
    approval_of,
    awaiting_approval,
    dom_id,
    message_item,
    pretty_json,
    run_view,
    tool_card,
    tool_state,
    transcript_items,
    usage_line,
    when,
)
from .markup import render_markdown, sanitize
from .monitor_row import monitor_row
from .run_status import run_status
from .totals import active_totals

__all__ = [  # the view models are used through here by consumers, views and tests
    "TERMINAL_STATUSES",
    "approval_calls",
    "approval_of",
    "awaiting_approval",
    "dom_id",
    "message_item",
    "monitor_row",
    "pretty_json",
    "render_markdown",
    "run_status",
    "run_view",
    "sanitize",
    "tool_card",
    "tool_state",
    "transcript_items",
    "when",
]


# -- chat fragments ----------------------------------------------------------------------------


def _render(template: str, **context: Any) -> str:
    return render_to_string(f"agents/{template}", context)


def transcript(
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    partial: Mapping[str, Any] | None = None,
    *,
    oob: bool = False,
    awaiting: frozenset[str] = frozenset(),
) -> str:
    return _render(
        "_transcript.html",
        session_id=session_id,
        items=transcript_items(messages, awaiting),
        partial=stream_view(partial) if partial else None,
        oob=oob,
    )


_NOTHING_WAITING = (
    '<div id="waiting" class="waiting" data-testid="waiting" aria-live="assertive"{}>\n  \n</div>'
)


def waiting(session_id: str, row: Mapping[str, Any] | None, *, oob: bool = False) -> str:
    if not (row or {}).get("waiting_for"):  # sent with every status: the common case is quick
        return _NOTHING_WAITING.format(' hx-swap-oob="true"' if oob else "")
    view = run_view(row)
    return _render(
        "_waiting.html",
        session_id=session_id,
        run=view if view and view["active"] else None,
        oob=oob,
    )


def snapshot(session_id: str, snap: Snapshot, last: Mapping[str, Any] | None = None) -> str:
    """Replaces the transcript, the status bar and the open waits in one frame.

    ``last``: the session's latest run, shown in the status bar when none is active.
    """
    row = snap.run
    partial = snap.partial.as_dict() if snap.partial is not None else None
    awaiting = awaiting_approval(row)
    return "".join(
        (
            transcript(session_id, snap.messages, partial, oob=True, awaiting=awaiting),
            run_status(row or last, oob=True),
            waiting(session_id, row, oob=True),
            live_state(snap.live),
        )
    )


#: Daphne refuses WebSocket frames over 1 MiB, sent as well as received, and closes the
#: socket: a snapshot larger than this many characters goes out as several frames.
SNAPSHOT_FRAME_CHARS = 256 * 1024


def snapshot_frames(
    session_id: str,
    snap: Snapshot,
    last: Mapping[str, Any] | None = None,
    limit: int = SNAPSHOT_FRAME_CHARS,
) -> list[str]:
    """The snapshot as frames of at most ``limit`` characters each (a single message larger
    than that still goes out whole): the first replaces the transcript with its oldest part,
    the next ones append the rest in order, then the streaming answer."""
    whole = snapshot(session_id, snap, last)
    if len(whole) <= limit:
        return [whole]
    row = snap.run
    items = transcript_items(snap.messages, awaiting_approval(row))
    rendered = [_render("_message.html", item=item) for item in items]
    chunks: list[list[str]] = [[]]
    size = 0
    for html in rendered:
        if chunks[-1] and size + len(html) > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(html)
        size += len(html)
    first = _render(
        "_transcript_parts.html", session_id=session_id, parts="".join(chunks[0]), oob=True
    )
    frames = [
        first
        + run_status(row or last, oob=True)
        + waiting(session_id, row, oob=True)
        + live_state(snap.live)
    ]
    frames += [
        f'<div hx-swap-oob="beforeend:#transcript">{"".join(chunk)}</div>' for chunk in chunks[1:]
    ]
    if snap.partial is not None:
        bubble = _render("_streaming.html", s=stream_view(snap.partial.as_dict()))
        frames.append(f'<div hx-swap-oob="beforeend:#transcript">{bubble}</div>')
    return frames


def live_state(live: bool) -> str:
    """The "live updates reconnecting" banner, shown while the channel layer is away."""
    return _render("_live_state.html", live=live)


def stream_view(partial: Mapping[str, Any]) -> dict[str, Any]:
    request_id = str(partial.get("request_id", ""))
    iteration = int(partial.get("iteration") or 0)
    return {
        "key": f"{dom_id(request_id)}-{iteration}",
        "request_id": request_id,
        "iteration": iteration,
        "text": partial.get("text", ""),
        "reasoning": partial.get("reasoning", ""),
    }


def stream_key(request_id: str, iteration: int) -> str:
    return f"{dom_id(request_id)}-{iteration}"


def stream_open(request_id: str, iteration: int) -> str:
    """An empty streaming bubble appended to the transcript."""
    bubble = _render(
        "_streaming.html",
        s=stream_view({"request_id": request_id, "iteration": iteration}),
    )
    return f'<div hx-swap-oob="beforeend:#transcript">{bubble}</div>'


def delta(request_id: str, iteration: int, kind: str, text: str) -> str:
    target = "reasoning" if kind == "reasoning" else "answer"
    return (
        f'<span hx-swap-oob="beforeend:#{target}-{stream_key(request_id, iteration)}">'
        f"{escape(text)}</span>"
    )


def stream_close(request_id: str, iteration: int) -> str:
    return f'<div id="stream-{stream_key(request_id, iteration)}" hx-swap-oob="delete"></div>'


def append_message(message: Mapping[str, Any]) -> str:
    item = message_item(message)
    html = _render("_message.html", item=item)
    return f'<div hx-swap-oob="beforeend:#transcript">{html}</div>'


def insert_divider(divider: Mapping[str, Any]) -> str:
    """A compaction's divider, above the first message it kept (else at the end)."""
    before = divider.get("before")
    if not before:
        return append_message(divider)
    html = _render("_message.html", item=message_item(divider))
    return f'<div hx-swap-oob="beforebegin:#msg-{dom_id(str(before))}">{html}</div>'


def answer_usage(request_id: str, label: str) -> str:
    """The quiet usage line of a run that just completed, appended after its answer."""
    html = _render("_answer_usage.html", usage=usage_line(request_id, label))
    return f'<div hx-swap-oob="beforeend:#transcript">{html}</div>'


def tool_update(call: Mapping[str, Any], status: str, result: Mapping[str, Any] | None) -> str:
    return _render("_tool_card.html", card=tool_card(call, result, status), oob=True)


def error(code: str, detail: str) -> str:
    """The error frame: shown in #errors, nothing else changes."""
    return _render("_error.html", code=code, detail=detail)


def reply(
    action: str, accepted: bool, reason: str, text: str = "", headline: str | None = None
) -> str:
    """The answer to one frame; ``text``: the message it carried, shown while it waits."""
    said, detail = wording.reply(action, accepted, reason)
    headline = headline or said
    waits = accepted and action in ("steer", "queue")
    return _render(
        "_reply.html",
        action=action,
        accepted=accepted,
        headline=headline,
        reason=detail,
        text=text if waits else "",
    )


def clear_reply() -> str:
    """Empties the reply line: what it said no longer applies once the run has ended."""
    return '<div hx-swap-oob="innerHTML:#control-reply"></div>'


# -- monitor fragments -------------------------------------------------------------------------


#: The largest frame a socket sends: Daphne's WebSocket refuses messages over 1 MiB (and
#: closes the socket), which a monitor of a thousand runs would reach in one tick.
MAX_FRAME_BYTES = 256 * 1024


def frames_of(parts: Iterable[str], limit: int | None = None) -> list[str]:
    """``parts`` (whole top-level elements) joined into as few frames as fit in ``limit``.

    A frame holds at least one part, so a part over the limit goes alone. ``limit``
    defaults to MAX_FRAME_BYTES.
    """
    limit = MAX_FRAME_BYTES if limit is None else limit
    frames: list[str] = []
    current: list[str] = []
    size = 0
    for part in parts:
        length = len(part.encode())
        if current and size + length > limit:
            frames.append("".join(current))
            current, size = [], 0
        current.append(part)
        size += length
    if current:
        frames.append("".join(current))
    return frames


def monitor_tables(
    active: Sequence[Mapping[str, Any]], recent: Sequence[Mapping[str, Any]], totals: str
) -> list[str]:
    """Frames that replace both monitor tables and the totals (the snapshot a monitor socket
    starts with): each table's first rows replace it, the rest are appended in frames of at
    most MAX_FRAME_BYTES."""
    parts: list[str] = []
    for tbody, rows in (("active-runs", active), ("recent-runs", recent)):
        html = [monitor_row(row) for row in rows]
        fit, size = 0, 0
        while fit < len(html) and size + len(html[fit].encode()) <= MAX_FRAME_BYTES // 2:
            size += len(html[fit].encode())
            fit += 1
        parts.append(_render("_runs_tbody.html", tbody_id=tbody, rows=html[:fit], oob=True))
        parts += [f'<tbody hx-swap-oob="beforeend:#{tbody}">{row}</tbody>' for row in html[fit:]]
    return frames_of([*parts, totals])


def monitor_totals(active: Iterable[Mapping[str, Any]], *, oob: bool = True) -> str:
    """The active table's <tfoot> of totals: a table section, so it may follow <tbody>s in a
    frame (never a top-level <tr>, see monitor_update)."""
    return _render("_monitor_totals.html", totals=active_totals(active), oob=oob)


def monitor_update(row: Mapping[str, Any], *, shown_active: bool) -> list[str]:
    """One row's change as frames: replaced in place, added to the active table, or moved.

    The ws extension parses a frame inside a <template>, whose first element fixes the
    parser's mode: after a top-level <tr>, a <tbody> is dropped (and the reverse). So a frame
    never mixes the two, and moving a row takes two frames.
    """
    rid = dom_id(str(row.get("request_id", "")))
    if row.get("status") in TERMINAL_STATUSES:
        return [
            f'<tr id="run-{rid}" hx-swap-oob="delete"></tr>',
            f'<tbody hx-swap-oob="afterbegin:#recent-runs">{monitor_row(row)}</tbody>',
        ]
    if shown_active:
        return [monitor_row(row, oob="true")]
    return [f'<tbody hx-swap-oob="beforeend:#active-runs">{monitor_row(row)}</tbody>']
