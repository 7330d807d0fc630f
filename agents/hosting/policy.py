"""What a browser action means for a run hosted here: double texting and operator actions.

Each function answers with a ControlReply and changes nothing when it refuses. Which
operator actions exist comes from the run's extensions (their operator protocol), so a
third-party extension's waits are answered like the built-in ones.
"""

from __future__ import annotations

from typing import Any

from ..models import RunKind
from .run import FollowUp, HostedRun
from .wire import ControlReply

BUSY = "A run is still active in this session: wait for it to finish or cancel it."


def title_from(text: str) -> str:
    """A new session's title: its first message on one line, at most 80 characters."""
    title = " ".join(text.split())
    return title[:80] + ("…" if len(title) > 80 else "")


def _steer(hosted: HostedRun, user_id: int | None, by: str, text: str) -> bool:
    spec = hosted.protocol.action("steer")
    if spec is None:
        return False
    return hosted.offer(spec.event_for({"text": text}, by or str(user_id)))


async def double_text(hosted: HostedRun, user_id: int | None, by: str, text: str) -> ControlReply:
    """A chat message while the session's run is active: the profile's policy decides."""
    policy = hosted.double_texting
    request_id = hosted.request_id
    if policy == "reject":
        return ControlReply(False, BUSY, "reject", request_id)
    if policy == "steer":
        if _steer(hosted, user_id, by, text):
            return ControlReply(True, "Sent to the running agent as steering.", "steer", request_id)
        hosted.queued.append(FollowUp(user_id, text))
        return ControlReply(
            True, "The run is finishing; your message starts the next run.", "queue", request_id
        )
    if policy == "interrupt":
        hosted.queued.append(FollowUp(user_id, text))
        await hosted.cancel(by)
        return ControlReply(
            True, "Cancelling the active run; your message starts next.", "interrupt", request_id
        )
    hosted.queued.append(FollowUp(user_id, text))
    return ControlReply(True, "Queued until the active run finishes.", "queue", request_id)


async def compact_while_active(hosted: HostedRun, user_id: int | None, by: str) -> ControlReply:
    """ "Compact conversation" while the session's run is active: the profile's policy decides.

    A compaction cannot steer a run, so "steer" queues it like "queue"; "interrupt"
    cancels the active run and compacts next; "reject" refuses.
    """
    policy = hosted.double_texting
    request_id = hosted.request_id
    if policy == "reject":
        return ControlReply(False, BUSY, "reject", request_id)
    hosted.queued.append(FollowUp(user_id, "", RunKind.COMPACTION))
    if policy == "interrupt":
        await hosted.cancel(by)
        return ControlReply(
            True,
            "Cancelling the active run; the conversation is compacted next.",
            "interrupt",
            request_id,
        )
    return ControlReply(
        True, "The conversation is compacted when the active run finishes.", "queue", request_id
    )


async def operate(
    hosted: HostedRun, by: str, user_id: int | None, action: str, payload: dict[str, Any]
) -> ControlReply:
    """An operator action (cancel, or one the run's extensions declare) on a hosted run."""
    request_id = hosted.request_id
    if hosted.done.is_set():
        return ControlReply(False, "The run has finished.", action, request_id)
    if action == "message":
        return await double_text(hosted, user_id, by, str(payload.get("text", "")))
    if action == "compact":
        return await compact_while_active(hosted, user_id, by)
    if action == "cancel":
        if not await hosted.cancel(by):
            return ControlReply(False, "Cancel was already requested.", action, request_id)
        return ControlReply(True, "Cancelling.", action, request_id)
    if hosted.handle is None:
        # Queued: the agent is still being built, so nothing can be waiting for an answer.
        return ControlReply(
            False, "The run is still starting: nothing is waiting yet.", action, request_id
        )
    if action == "steer":
        if _steer(hosted, user_id, by, str(payload.get("text", ""))):
            return ControlReply(True, "Steering sent.", action, request_id)
        return ControlReply(
            False,
            "The run cannot take steering now (it is finishing, or its profile has no "
            "steering extension).",
            action,
            request_id,
        )
    spec = hosted.protocol.action(action)
    if spec is None:
        return ControlReply(False, f"Unknown action {action!r}.", action, request_id)
    try:
        accepted = hosted.offer(spec.event_for(payload, by))
    except (TypeError, ValueError) as exc:
        return ControlReply(False, f"Malformed answer: {exc}", action, request_id)
    if accepted:
        return ControlReply(True, "", action, request_id)
    waiting = {item.get("id") for item in hosted.run.waiting_for or []}
    if spec.correlation is not None and payload.get(spec.correlation) not in waiting:
        reason = "No such pending request: it was already answered, timed out or never asked."
    else:
        reason = "The answer was refused (malformed, or already answered)."
    return ControlReply(False, reason, action, request_id)
