"""ToolApprovalExtension: tool calls that wait for an operator's approve or deny.

Protocol (what the dashboard sends and shows):

- Outward, when a model answer asks for tools that need approval, one CUSTOM event per
  such call, all emitted before the first of them runs, so an operator sees every call of
  the turn at once and may answer them in any order::

      AgentEvent(CUSTOM, name=APPROVAL_REQUESTED,          # "approval.requested"
                 data={"id": call_id, "tool": name, "arguments": {...},
                       "timeout_seconds": 300.0, "deadline": epoch_seconds})

  ``pending_waits(session_id)`` lists the same data (plus ``request_id``) for the calls
  still undecided, for a page that (re)connects mid-run.

- Inward, one decision per call::

      agent.emit_external_event(
          ExternalEvent(APPROVAL_EVENT,                    # "approval"
                        {"id": call_id, "decision": "approve" | "deny",
                         "reason": optional str (<= 2000), "by": optional str (<= 200)}),
          config=AgentRunConfig(session_id=..., request_id=...))

  Accepted (the result names this extension) only for an undecided call of that session
  (and of that request when request_id is given) with a well-formed payload; a duplicate,
  a forged or foreign id and a malformed payload return [] and change nothing.

- Outward, once the call is settled::

      AgentEvent(CUSTOM, name=APPROVAL_RESOLVED,           # "approval.resolved"
                 data={"id": call_id, "decision": DECISION_*, "reason": ..., "by": ...})

  with decision "approved" (the tool ran), "denied" (it did not; the model reads the
  reason), "timeout" (no decision before the deadline; never recorded as a denial),
  "skipped" (steering skipped the call, its request is withdrawn) or "closed" (the wait
  was closed from outside). A run that fails or is cancelled closes its waits and emits
  nothing more: the run's own end tells the page.

The ToolMessage of a gated call carries ``attributes["approval"]`` with the same decision
(and ``reason`` / ``by`` when an operator decided), so the transcript keeps the record.
"""

from __future__ import annotations

import copy
import fnmatch
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..runtime.events import AgentEvent, AgentEventType
from ..runtime.external import ExternalEventExtension, ExternalWaitClosed
from ..runtime.operator import ActionSpec, WaitSpec
from ..runtime.tools import ToolResult
from .settings import ToolApprovalSettings

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext
    from ..runtime.extension import ToolCallNext
    from ..runtime.messages import AssistantMessage, ToolCall
    from ..runtime.model import ModelResponse

APPROVAL_EVENT = "approval"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_RESOLVED = "approval.resolved"

DECISION_APPROVED = "approved"
DECISION_DENIED = "denied"
DECISION_TIMEOUT = "timeout"
DECISION_SKIPPED = "skipped"
DECISION_CLOSED = "closed"

MAX_REASON_LENGTH = 2000
MAX_OPERATOR_LENGTH = 200


class ApprovalDecision(BaseModel):
    """One operator decision, as carried by an ExternalEvent named APPROVAL_EVENT."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)  # the tool call id the decision is for
    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=MAX_REASON_LENGTH)
    by: str | None = Field(default=None, max_length=MAX_OPERATOR_LENGTH)  # operator, for the record


class ToolApprovalExtension(ExternalEventExtension):
    """Holds every gated tool call until an operator approves or denies it, or time runs out.

    Gated are the calls whose tool name matches ``settings.tools`` and no ``settings.exempt``
    pattern (``fnmatch.fnmatchcase``) and that name a tool registered for the request (an
    unknown tool fails without running anything, so nobody is asked about it). One instance
    may serve many sessions: waits are keyed by (session id, tool call id).
    """

    event_names: ClassVar[frozenset[str]] = frozenset({APPROVAL_EVENT})
    operator_actions: ClassVar[tuple[ActionSpec, ...]] = tuple(
        ActionSpec(
            decision,
            APPROVAL_EVENT,
            fields={"id": "id", "reason": "reason"},
            constants={"decision": decision},
        )
        for decision in ("approve", "deny")
    )
    operator_waits: ClassVar[tuple[WaitSpec, ...]] = (
        WaitSpec(
            "approval",
            APPROVAL_REQUESTED,
            frozenset({APPROVAL_RESOLVED}),
            fields=("tool", "arguments", "deadline"),
        ),
    )
    settings_model: ClassVar[type[ToolApprovalSettings]] = ToolApprovalSettings

    def __init__(self, settings: ToolApprovalSettings | None = None, **fields: Any) -> None:
        if settings is not None and fields:
            raise TypeError("pass either a ToolApprovalSettings or its fields, not both")
        self.settings = settings if settings is not None else ToolApprovalSettings(**fields)

    def needs_approval(self, tool_name: str) -> bool:
        """True when a call of this tool waits for an operator (ignoring registration)."""
        settings = self.settings
        return any(fnmatch.fnmatchcase(tool_name, p) for p in settings.tools) and not any(
            fnmatch.fnmatchcase(tool_name, p) for p in settings.exempt
        )

    def parse_response(self, payload: Mapping[str, Any]) -> ApprovalDecision:
        return ApprovalDecision.model_validate(dict(payload))

    # -- hooks ------------------------------------------------------------------------

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        """Ask for every gated call of the answer at once, before the first one runs.

        On error or cancellation later in the request the waits opened here are closed
        by the base class (on_error, RunCancelledEvent).
        """
        for call in response.message.tool_calls:
            if self._gated(context, call) and call.id not in self._deadlines(context):
                await self._request(context, call)

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: ToolCallNext
    ) -> ToolResult:
        """Wait for the call's decision, then run it (approve) or refuse it (deny, timeout).

        Cancellation while waiting propagates (the runtime records a cancelled result);
        the wait is removed on every path.
        """
        if not self._gated(context, call):
            return await call_next(call)
        deadlines = self._deadlines(context)
        if call.id not in deadlines:
            # A call that reached us without its after_model request, e.g. a replaced id.
            await self._request(context, call)
        remaining = max(0.0, deadlines.pop(call.id) - time.time())
        try:
            decision: ApprovalDecision = await self.wait_for(context, call.id, timeout=remaining)
        except TimeoutError:
            await self._resolved(context, call.id, DECISION_TIMEOUT)
            timeout = f"{self.settings.timeout_seconds:g}"
            return ToolResult(
                content=f"Not run: approval timed out after {timeout} s",
                is_error=True,
                attributes={"approval": DECISION_TIMEOUT},
            )
        except ExternalWaitClosed:
            await self._resolved(context, call.id, DECISION_CLOSED)
            return ToolResult(
                content="Not run: the approval request was closed before a decision arrived",
                is_error=True,
                attributes={"approval": DECISION_CLOSED},
            )
        if decision.decision == "deny":
            await self._resolved(context, call.id, DECISION_DENIED, decision.reason, decision.by)
            return ToolResult(
                content=f"Denied by the operator: {decision.reason or 'no reason given'}",
                is_error=True,
                attributes={
                    "approval": DECISION_DENIED,
                    "reason": decision.reason,
                    "by": decision.by,
                },
            )
        await self._resolved(context, call.id, DECISION_APPROVED, decision.reason, decision.by)
        result = await call_next(call)
        if not isinstance(result, ToolResult):
            result = ToolResult.from_value(result)
        result.attributes = {
            **result.attributes,
            "approval": DECISION_APPROVED,
            "reason": decision.reason,
            "by": decision.by,
        }
        return result

    async def after_turn(self, context: AgentRunContext, result: AssistantMessage) -> None:
        """Withdraw the requests of calls the turn settled without running (steering skips)."""
        deadlines = self._deadlines(context)
        for call in result.tool_calls:
            deadlines.pop(call.id, None)
            if self.close_wait(context.session_id, call.id):
                await self._resolved(context, call.id, DECISION_SKIPPED)

    # -- helpers ----------------------------------------------------------------------

    def _gated(self, context: AgentRunContext, call: ToolCall) -> bool:
        return call.name in context.tools and self.needs_approval(call.name)

    def _deadlines(self, context: AgentRunContext) -> dict[str, float]:
        # Request-scoped, so it disappears with the context on every end path.
        deadlines: dict[str, float] = context.metadata.setdefault(f"{self.name}.deadlines", {})
        return deadlines

    async def _request(self, context: AgentRunContext, call: ToolCall) -> None:
        timeout = self.settings.timeout_seconds
        deadline = time.time() + timeout
        data = {
            "tool": call.name,
            "arguments": copy.deepcopy(call.arguments),
            "timeout_seconds": timeout,
            "deadline": deadline,
        }
        self.open_wait(context, call.id, data)
        self._deadlines(context)[call.id] = deadline
        await context.emit(
            AgentEvent(AgentEventType.CUSTOM, name=APPROVAL_REQUESTED, data={"id": call.id, **data})
        )

    async def _resolved(
        self,
        context: AgentRunContext,
        call_id: str,
        decision: str,
        reason: str | None = None,
        by: str | None = None,
    ) -> None:
        await context.emit(
            AgentEvent(
                AgentEventType.CUSTOM,
                name=APPROVAL_RESOLVED,
                data={"id": call_id, "decision": decision, "reason": reason, "by": by},
            )
        )
