"""The chat's status bar (``#run-status``), rendered in Python.

A run's bar is sent to its chat every time the run changes state (five times a run or
more), so in a burst of run starts the template it replaces (about 170 µs) was one of the
server's larger costs; this builds the same HTML in about 10 µs, every value escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.safestring import SafeString, mark_safe

from . import wording
from .html_text import escape, run_url, text
from .items import TERMINAL_STATUSES, usage_state

_IDLE = '\n    <span class="badge ready" data-testid="phase">idle</span>\n  '
_CANCEL_FORM = (
    '<form ws-send class="inline" data-testid="cancel-form">\n'
    '          <input type="hidden" name="type" value="cancel">\n'
    '          <button type="submit" class="danger">Cancel</button>\n'
    "        </form>"
)
_STEER_HINT = (
    '<div class="steer-hint muted small" data-testid="steer-hint">A run is active: a message '
    "you send now is handled by this agent's double-texting policy, or\n"
    '        <form ws-send class="inline steer-form" data-reset-on-send>\n'
    '          <input type="hidden" name="type" value="steer">\n'
    '          <input type="text" name="text" maxlength="10000" required '
    'placeholder="steer the run…" aria-label="Steering hint">\n'
    '          <button type="submit">Steer</button>\n'
    "        </form>\n"
    "      </div>"
)


def _usage(row: Mapping[str, Any], active: bool) -> str:
    usage = row.get("usage") or {}
    state = usage_state(row, active)
    if state == "estimated":
        return text(usage.get("label"))
    if state == "pending":
        return "tokens counted when the model call ends"
    line = f"{text(row.get('input_tokens'))} in / {text(row.get('output_tokens'))} out tokens"
    if usage:
        line += f" · {text(usage.get('cost_label'))}"
    return line


def _cancel_state(row: Mapping[str, Any]) -> str:
    label = escape(wording.cancel_state(row.get("cancel_state")))
    return f'<span class="cancel-state badge cancelled" data-testid="cancel-state">{label}</span>'


def _body(row: Mapping[str, Any]) -> str:
    status, phase = row.get("status"), row.get("phase")
    active = status not in TERMINAL_STATUSES
    label = escape(wording.status(status))
    said = label if active else f"last run {label}"
    tool = row.get("current_tool")
    if tool:
        said += f" · <code>{escape(tool)}</code>"
    iterations = row.get("iterations")
    plural = "" if iterations == 1 else "s"
    said += f" · {text(iterations)} model call{plural} · {_usage(row, active)}"
    parts = [
        f'\n    <span class="badge {text(phase)}" data-testid="phase">'
        f"{escape(wording.phase(phase))}</span>",
        f'\n    <span class="muted" data-testid="run-usage">{said}</span>',
        f'\n    <a class="small" href="{run_url(str(row.get("request_id", "")))}">details</a>',
    ]
    if active:
        parts.append(f"\n      {_cancel_state(row) if row.get('cancel_state') else _CANCEL_FORM}")
        parts.append(f"\n      {_STEER_HINT}")
    elif row.get("cancel_state"):
        parts.append(f"\n      {_cancel_state(row)}")
    if row.get("error"):
        error = escape(row["error"])
        parts.append(f'\n    <span class="error" data-testid="run-error">{error}</span>')
    return "".join(parts) + "\n  "


def run_status(row: Mapping[str, Any] | None, *, oob: bool = False) -> SafeString:
    """The bar for ``row`` (the active run's, or the last run's), or "idle" without one."""
    status = (row or {}).get("status") or "idle"
    phase = (row or {}).get("phase") or ""
    cancel = (row or {}).get("cancel_state") or ""
    swap = ' hx-swap-oob="true"' if oob else ""
    return mark_safe(
        f'<div id="run-status" class="run-status" data-testid="run-status" '
        f'data-status="{escape(status)}" data-phase="{escape(phase)}" '
        f'data-cancel-state="{escape(cancel)}"{swap}>'
        f"{_body(row) if row is not None else _IDLE}</div>"
    )
