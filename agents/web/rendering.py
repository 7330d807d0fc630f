"""HTML for the browser: sanitised markdown of model output and the htmx fragments sockets send.

Model output is untrusted. Message content goes through markdown-it with raw HTML disabled and
then nh3 with a small allow-list; everything else reaches the page through auto-escaping Django
templates. Streaming deltas are escaped text only. Every fragment a socket sends is a sequence
of top-level elements the htmx ws extension swaps out of band (by id or by hx-swap-oob).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import nh3
from django.template.loader import render_to_string
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from ..hosting import Snapshot
from . import wording

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "interrupted"})

_markdown = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

# Only what markdown itself produces; no style, no id/class except code languages.
_ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote",
        "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}
_SAFE_DOM_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def render_markdown(text: str) -> SafeString:
    """Untrusted markdown as HTML that can neither run script nor restyle the page."""
    return sanitize(_markdown.render(text or ""))


def sanitize(html: str) -> SafeString:
    """HTML reduced to the markdown allow-list: no script, handlers, styles or odd URLs."""
    cleaned = nh3.clean(
        html,
        tags=set(_ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(names) for tag, names in _ALLOWED_ATTRIBUTES.items()},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
        strip_comments=True,
    )
    return mark_safe(cleaned)  # noqa: S308 - nh3 output is the sanitised HTML


def dom_id(value: str) -> str:
    """A token safe inside an HTML id and a CSS #selector (provider ids are not guaranteed)."""
    if _SAFE_DOM_ID.fullmatch(value or ""):
        return value
    return "h" + hashlib.sha256((value or "").encode()).hexdigest()[:20]


def pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def when(epoch: float | None) -> dt.datetime | None:
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(float(epoch), tz=dt.UTC)


# -- view models -------------------------------------------------------------------------------


def approval_of(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The approval record of a tool result: {decision, reason, by}, or None if ungated.

    The approval extension stores the decision as a string in attributes["approval"] with
    "reason" and "by" beside it; a mapping under "approval" is accepted too.
    """
    attributes = (result or {}).get("attributes") or {}
    approval = attributes.get("approval")
    if isinstance(approval, Mapping):
        return {"decision": approval.get("decision"), "reason": approval.get("reason"),
                "by": approval.get("by")}  # fmt: skip
    if isinstance(approval, str) and approval:
        return {"decision": approval, "reason": attributes.get("reason"),
                "by": attributes.get("by")}  # fmt: skip
    return None


def tool_state(result: Mapping[str, Any] | None, status: str = "") -> str:
    """One token for a tool card: awaiting, running, ok, error, skipped or denied.

    A call without a result is running (the card exists only once the model made the call),
    or "awaiting" while the run waits for its approval.
    """
    if result is None:
        return {"awaiting": "awaiting", "failed": "error", "skipped": "skipped"}.get(
            status, "running"
        )
    approval = approval_of(result)
    if approval and approval["decision"] == "denied":
        return "denied"
    if result.get("skipped") or status == "skipped":
        return "skipped"
    if result.get("is_error") or status == "failed":
        return "error"
    return "ok"


def tool_card(
    call: Mapping[str, Any], result: Mapping[str, Any] | None = None, status: str = ""
) -> dict[str, Any]:
    state = tool_state(result, status)
    return {
        "dom": dom_id(str(call.get("id", ""))),
        "id": call.get("id", ""),
        "name": call.get("name", ""),
        "arguments": pretty_json(call.get("arguments", {})),
        "result": result,
        "state": state,
        "state_label": wording.tool_state(state),
        "approval": approval_of(result),
    }


def message_item(
    message: Mapping[str, Any],
    results: Mapping[str, Any] | None = None,
    awaiting: frozenset[str] = frozenset(),
) -> dict:
    """A message dict with what its template needs: rendered markdown and its tool cards."""
    results = results or {}
    role = message.get("role", "")
    return {
        "m": message,
        "dom": dom_id(str(message.get("id", ""))),
        "html": render_markdown(message.get("content", "")) if role == "assistant" else "",
        "cards": [
            tool_card(
                call,
                results.get(call.get("id")),
                "awaiting" if call.get("id") in awaiting else "",
            )
            for call in message.get("tool_calls") or []
        ],
    }


def awaiting_approval(row: Mapping[str, Any] | None) -> frozenset[str]:
    """The ids of the tool calls the run waits to have approved."""
    waits = (row or {}).get("waiting_for") or []
    return frozenset(str(w.get("id")) for w in waits if w.get("kind") == "approval")


def transcript_items(
    messages: Sequence[Mapping[str, Any]], awaiting: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Messages in order, with each tool result folded into its call's card."""
    called = {
        call.get("id")
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    }
    results = {
        message.get("tool_call_id"): message
        for message in messages
        if message.get("role") == "tool" and message.get("tool_call_id") in called
    }
    items = []
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in called:
            continue
        items.append(message_item(message, results, awaiting))
    return items


def run_view(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run row plus what templates show: datetimes, activity and its open waits."""
    if row is None:
        return None
    waits = [
        {
            **wait,
            "dom": dom_id(str(wait.get("id", ""))),
            "arguments_json": pretty_json(wait.get("arguments", {})),
        }
        for wait in row.get("waiting_for") or []
    ]
    return {
        **row,
        "dom": dom_id(str(row.get("request_id", ""))),
        "active": row.get("status") not in TERMINAL_STATUSES,
        "phase_label": wording.phase(row.get("phase")),
        "status_label": wording.status(row.get("status")),
        "cancel_label": wording.cancel_state(row.get("cancel_state")),
        "started": when(row.get("started_at")),
        "finished": when(row.get("finished_at")),
        "waits": waits,
    }


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


def run_status(session_id: str, row: Mapping[str, Any] | None, *, oob: bool = False) -> str:
    return _render("_run_status.html", session_id=session_id, run=run_view(row), oob=oob)


def waiting(session_id: str, row: Mapping[str, Any] | None, *, oob: bool = False) -> str:
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
            run_status(session_id, row or last, oob=True),
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
        + run_status(session_id, row or last, oob=True)
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


def approval_calls(row: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The tool calls the run waits to have approved, as call dicts by id."""
    waits = (row or {}).get("waiting_for") or []
    return {
        str(w.get("id")): {
            "id": w.get("id"),
            "name": w.get("tool"),
            "arguments": w.get("arguments"),
        }
        for w in waits
        if w.get("kind") == "approval"
    }


# -- monitor fragments -------------------------------------------------------------------------


def monitor_row(row: Mapping[str, Any], *, oob: str = "") -> str:
    return _render("_monitor_row.html", run=run_view(row), oob=oob)


def monitor_tables(active: Iterable[Mapping[str, Any]], recent: Iterable[Mapping[str, Any]]) -> str:
    """Replaces both monitor tables (the snapshot a monitor socket starts with)."""
    return "".join(
        _render("_runs_tbody.html", tbody_id=tbody, runs=[run_view(row) for row in rows], oob=True)
        for tbody, rows in (("active-runs", active), ("recent-runs", recent))
    )


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
