"""The JSON dicts the host sends to pages: a message, a tool call, a run's monitor row.

ONE builder per kind; consumers, the snapshot, the monitor and `manage.py agent` all read these.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from ..models import Message, Run, RunStatus
from ..runtime.messages import AnyMessage, ToolCall
from ..session_store import message_fields


def _epoch(value: Any) -> float | None:
    return value.timestamp() if value is not None else None


def message_dict(
    message: AnyMessage | Message, *, seq: int | None = None, request_id: str | None = None
) -> dict[str, Any]:
    """The browser-facing dict of a message, from either a runtime message or a row."""
    if isinstance(message, Message):
        return {
            "id": message.message_id,
            "seq": message.seq,
            "role": message.role,
            "content": message.content,
            "reasoning": message.reasoning,
            "tool_calls": list(message.tool_calls or []),
            "tool_call_id": message.tool_call_id,
            "tool_name": message.tool_name,
            "is_error": message.is_error,
            "skipped": message.skipped,
            "attributes": dict(message.attributes or {}),
            "request_id": request_id,
            "created_at": message.created_at.timestamp(),
        }
    fields = message_fields(message)
    return {
        "id": message.id,
        "seq": seq,
        "role": message.role,
        "content": message.content,
        "reasoning": fields.get("reasoning", ""),
        "tool_calls": fields.get("tool_calls", []),
        "tool_call_id": fields.get("tool_call_id", ""),
        "tool_name": fields.get("tool_name", ""),
        "is_error": fields.get("is_error", False),
        "skipped": fields.get("skipped", False),
        "attributes": dict(message.attributes),
        "request_id": request_id,
        "created_at": message.created_at,
    }


def divider_dict(
    summary_id: str,
    summary: str,
    summarized: int,
    request_id: str | None,
    before: str | None = None,
) -> dict[str, Any]:
    """The transcript's divider where a compaction summarised the messages above it.

    Shaped like a message dict (role "summary", the summary row's id) so the transcript and
    the live filter treat it as one more item; ``content`` is the summary without its prefix;
    ``before``: the id of the first message kept verbatim (where a live page inserts it).
    """
    return {
        "id": summary_id,
        "role": "summary",
        "content": summary,
        "summarized": summarized,
        "before": before,
        "request_id": request_id,
        "attributes": {},
        "tool_calls": [],
    }


def call_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def run_row(
    run: Run, *, owner: str = "", profile: str = "", title: str = "", estimate: int = 0
) -> dict[str, Any]:
    """The monitor row of a run (callers pass related names to avoid extra queries).

    ``estimate`` is the estimated output of the model call streaming now: the row's
    ``usage`` then says ``estimated`` (shown with "≈") until the provider's usage arrives.
    """
    elapsed = run.elapsed_seconds
    return {
        "request_id": run.request_id,
        "session_id": run.session_id,
        "session_title": title,
        "user": owner,
        "profile": profile,
        "status": run.status,
        "phase": run.phase,
        "cancel_state": run.cancel_state,
        "current_tool": run.current_tool,
        "iterations": run.iterations,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "usage": usage_dict(run, estimate),
        "started_at": _epoch(run.started_at),
        "finished_at": _epoch(run.finished_at),
        "elapsed": round(elapsed, 3) if elapsed is not None else 0.0,
        "waiting_for": list(run.waiting_for or []),
        "error": run.error,
        "host": run.host,
        "kind": run.kind,
    }


def usage_dict(run: Run, estimate: int = 0) -> dict[str, Any]:
    """A run's tokens and cost as pages show them; cost is a string (exact Decimal) or None."""
    return {
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens + estimate,
        "total_tokens": run.input_tokens + run.output_tokens + estimate,
        "cache_read_tokens": run.cache_read_tokens,
        "cache_write_tokens": run.cache_write_tokens,
        "reasoning_tokens": run.reasoning_tokens,
        "estimated": estimate > 0,
        "cost": None if run.cost is None else f"{run.cost.normalize():f}",
        "currency": run.cost_currency,
        "label": usage_label(run, estimate),
        "cost_label": cost_label(run),
    }


def usage_label(run: Run, estimate: int = 0) -> str:
    """The quiet line: "1,234 tokens · $0.0123", "≈ 1,234 tokens · no price set"."""
    tokens = run.input_tokens + run.output_tokens + estimate
    prefix = "≈ " if estimate > 0 else ""
    return f"{prefix}{tokens:,} tokens · {cost_label(run)}"


def cost_label(run: Run) -> str:
    """The run's cost for display, or "no price set"."""
    if run.cost is None:
        return "no price set"
    return format_cost(run.cost, run.cost_currency or "USD")


def format_cost(cost: Any, currency: str) -> str:
    """A cost for display: four decimals below one unit, two above; "$" for USD."""
    quantum = Decimal("0.01") if abs(cost) >= 1 else Decimal("0.0001")
    amount = f"{cost.quantize(quantum, rounding=ROUND_HALF_UP):,}"
    return f"${amount}" if currency == "USD" else f"{amount} {currency}"


def notice(run: Run) -> dict[str, Any]:
    """The transcript's line for a run that did not complete, with its reason."""
    reason = run.error or {
        RunStatus.CANCELLED: "Cancelled.",
        RunStatus.INTERRUPTED: "Interrupted.",
    }.get(run.status, "Failed.")
    return {
        "id": f"notice-{run.request_id}",
        "role": "notice",
        "status": run.status,
        "content": reason,
        "request_id": run.request_id,
        "attributes": {},
        "tool_calls": [],
    }


def run_row_of(run: Run) -> dict[str, Any]:
    """run_row with the names from the run's session (select session__owner, __profile)."""
    session = run.session
    return run_row(
        run,
        owner=session.owner.get_username(),
        profile=run.profile.name if run.profile_id and run.profile else session.profile.name,
        title=str(session),
    )
