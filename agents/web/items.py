"""View models: what the templates are given for messages, tool cards and runs.

Plain dicts built from the browser dicts the host sends (``hosting.message_dict``,
``run_row``), with the derived fields pages show: rendered markdown, tool states and their
words, open waits, datetimes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import wording
from .markup import render_markdown

TERMINAL_STATUSES = frozenset(
    {"completed", "failed", "cancelled", "interrupted", "budget_exceeded"}
)
_SAFE_DOM_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


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
        "usage": usage_line(message.get("request_id") or "", message["usage"])
        if message.get("usage")
        else None,
    }


def usage_line(request_id: str, label: str) -> dict[str, str]:
    """The quiet line under a finished run's answer: its tokens and cost."""
    return {"dom": dom_id(request_id), "request_id": request_id, "label": label}


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


def usage_state(row: Mapping[str, Any], active: bool) -> str:
    """How a run's tokens are shown: "estimated" (a model call streams now), "pending" (an
    active run whose first call has not ended: nothing counted yet) or "counted"."""
    if (row.get("usage") or {}).get("estimated"):
        return "estimated"
    if active and not row.get("input_tokens") and not row.get("output_tokens"):
        return "pending"
    return "counted"


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


def usage_total(runs: Sequence[Any]) -> str:
    """A session's total over its runs: "1,234 tokens · $0.0123", costs summed per currency.

    Runs without a price add their tokens only; when none of the runs was priced the cost
    part says "no price set".
    """
    tokens = sum(run.input_tokens + run.output_tokens for run in runs)
    costs: dict[str, Any] = {}
    for run in runs:
        if run.cost is not None:
            currency = run.cost_currency or "USD"
            costs[currency] = costs.get(currency, 0) + run.cost
    if not costs:
        return f"{tokens:,} tokens · no price set"
    amounts = " + ".join(
        f"${amount:.4f}" if currency == "USD" else f"{amount:.4f} {currency}"
        for currency, amount in sorted(costs.items())
    )
    return f"{tokens:,} tokens · {amounts}"
