"""SteeringExtension: a message sent while a run works joins that run instead of waiting.

Protocol (what the dashboard sends):

    agent.emit_external_event(
        ExternalEvent(STEER_EVENT,                           # "steer"
                      {"text": str (1..10000, not blank), "by": optional str (<= 200)}),
        config=AgentRunConfig(session_id=..., request_id=optional))

The result names this extension when the session has an active request (the given one,
if request_id is set) that has not finished its last turn: the text is queued as
``UserMessage(text, attributes={"steering": True, "by": by})``. The runtime takes it at
its next safe point: the remaining tool calls of the current turn are skipped (skipped
ToolMessages, TOOL_SKIPPED), the message is appended, STEERING_STARTED is emitted with it,
and the next model call sees it. Otherwise the result is [] and nothing was queued: the
run is over (or about to be), so the dashboard applies the profile's double-texting policy.
The extension emits no CUSTOM events; STEERING_STARTED is the runtime's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..runtime.events import ExtensionEvent, ExternalEvent, RunCancelledEvent
from ..runtime.extension import AgentExtension
from ..runtime.messages import UserMessage
from ..runtime.operator import ActionSpec
from .settings import SteeringSettings

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext
    from ..runtime.messages import AssistantMessage
    from ..runtime.state import AgentRunConfig

STEER_EVENT = "steer"

MAX_STEERING_LENGTH = 10_000
MAX_OPERATOR_LENGTH = 200


class SteeringRequest(BaseModel):
    """One steering message, as carried by an ExternalEvent named STEER_EVENT."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(min_length=1, max_length=MAX_STEERING_LENGTH)
    by: str | None = Field(default=None, max_length=MAX_OPERATOR_LENGTH)  # who sent it

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("the steering text is blank")
        return text


class SteeringExtension(AgentExtension):
    """Routes "steer" events to the active request of their session.

    It remembers each running request's context from ``before_run`` until the request
    ends (``after_run``, ``on_error`` or RunCancelledEvent); the contexts' own steering
    intake decides, thread-safely, whether a message can still join.
    """

    settings_model: ClassVar[type[SteeringSettings]] = SteeringSettings
    operator_actions: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec("steer", STEER_EVENT, fields={"text": "text"}, correlation=None),
    )

    def __init__(self, settings: SteeringSettings | None = None, **fields: Any) -> None:
        if settings is not None and fields:
            raise TypeError("pass either a SteeringSettings or its fields, not both")
        self.settings = settings if settings is not None else SteeringSettings(**fields)
        self._lock = threading.Lock()  # accept runs on any thread
        self._contexts: dict[str, AgentRunContext] = {}

    def active_sessions(self) -> frozenset[str]:
        """Sessions whose running request this extension could steer now."""
        with self._lock:
            return frozenset(self._contexts)

    def accept(self, config: AgentRunConfig | None, event: ExternalEvent) -> bool:
        if event.name != STEER_EVENT or config is None or config.session_id is None:
            return False
        try:
            request = SteeringRequest.model_validate(dict(event.payload))
        except ValidationError:
            return False
        with self._lock:
            context = self._contexts.get(config.session_id)
        if context is None:
            return False
        if config.request_id is not None and config.request_id != context.request_id:
            return False
        message = UserMessage(request.text, attributes={"steering": True, "by": request.by})
        return context.offer_steering(message)

    # -- tracking ---------------------------------------------------------------------

    async def before_run(self, context: AgentRunContext) -> None:
        """Start routing the session's steering to this request.

        Registered here rather than in on_tool because ``Agent.compact`` also runs on_tool
        but none of the end hooks that would remove the entry.
        """
        with self._lock:
            self._contexts[context.session_id] = context

    async def after_run(self, context: AgentRunContext, result: AssistantMessage) -> None:
        self._forget(context)

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        self._forget(context)

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        if isinstance(event, RunCancelledEvent):
            self._forget(context)

    def _forget(self, context: AgentRunContext) -> None:
        with self._lock:
            # Only ever remove the entry this request made.
            if self._contexts.get(context.session_id) is context:
                del self._contexts[context.session_id]
