"""The words people read for the states and replies the code knows by token.

Tokens (phases, statuses, cancel states, reply actions) stay in data-* attributes for scripts
and tests; what a page shows comes from here, so no internal word reaches a user.
"""

from __future__ import annotations

PHASES = {
    "created": "starting",
    "loading_context": "loading the conversation",
    "ready": "thinking",
    "generating": "writing",
    "running_tool": "using a tool",
    "compacting": "summarising the conversation",
    "completed": "done",
    "failed": "failed",
    "cancelled": "stopped",
}

STATUSES = {
    "queued": "queued",
    "running": "running",
    "waiting": "waiting for an answer",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "stopped",
    "interrupted": "interrupted",
    "budget_exceeded": "budget exceeded",
}

CANCEL_STATES = {
    "requested": "stopping…",
    "acknowledged": "stopping…",
    "stopped": "stopped on request",
}

TOOL_STATES = {
    "awaiting": "awaiting approval",
    "running": "running",
    "ok": "done",
    "error": "failed",
    "skipped": "skipped",
    "denied": "denied",
}

# (action, accepted) -> what the person who sent it reads; the reason follows when there is one.
_REPLIES = {
    ("message", True): "Sent.",
    ("steer", True): "Sent to the agent as steering: it reads it at its next step.",
    ("queue", True): "Queued: it is sent when the current run finishes.",
    ("interrupt", True): "Stopping the current run; your message is sent next.",
    ("cancel", True): "Stopping the run…",
    ("approve", True): "Approved.",
    ("deny", True): "Denied.",
    ("answer", True): "Answer sent.",
    ("compact", True): "Compacting the conversation…",
    ("compact", False): "Not compacted.",
    ("reject", False): "Not sent.",
}


def phase(token: str | None) -> str:
    return PHASES.get(token or "", (token or "").replace("_", " "))


def status(token: str | None) -> str:
    return STATUSES.get(token or "", (token or "").replace("_", " "))


def cancel_state(token: str | None) -> str:
    return CANCEL_STATES.get(token or "", "")


def tool_state(token: str) -> str:
    return TOOL_STATES.get(token, token)


def reply(action: str, accepted: bool, reason: str) -> tuple[str, str]:
    """(headline, detail) of a reply, in words for the person who sent the frame.

    The host's reasons for steering, queueing and interrupting are already such words and
    become the headline; its bare confirmations ("Cancelling.") are replaced.
    """
    if accepted and reason and action in ("steer", "queue", "interrupt"):
        return reason, ""
    headline = _REPLIES.get((action, accepted)) or ("Done." if accepted else "Not done.")
    if accepted and reason in ("Cancelling.", "Steering sent."):
        reason = ""
    return headline, reason
