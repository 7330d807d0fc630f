"""Agent: a model, a system prompt, tools and extensions, serving one request per session."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .context import AgentRunContext
from .drive import InlineDriver
from .errors import AgentProtocolError
from .events import AgentEvent, ExternalEvent
from .extension import HOOK_NAMES, AgentExtension, overrides, sort_by_priority, track_requests
from .handle import RunHandle
from .ids import new_uuid7
from .memory import InMemoryMessageAccumulator
from .messages import AssistantMessage, SystemMessage, UserMessage
from .request import Request
from .stamping import OutwardSink
from .state import AgentRunConfig, AgentState
from .tools import AgentTool

if TYPE_CHECKING:
    from .model import AgentModel

log = logging.getLogger(__name__)


class Agent:
    """A model, a system prompt, static tools and extensions, serving many sessions.

    One session has at most one active request; any number of sessions run at
    once on one Agent (and may share extension instances).
    """

    def __init__(
        self,
        model: AgentModel,
        *,
        system_prompt: str = "You are a helpful assistant.",
        tools: Sequence[AgentTool] = (),
        extensions: Sequence[AgentExtension] | None = None,
        max_iterations: int = 36,
    ) -> None:
        if model is None or not callable(getattr(model, "stream", None)):
            raise TypeError("model must have an async stream(request) method")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError("max_iterations must be a positive integer")
        if extensions is None:
            extensions = [InMemoryMessageAccumulator()]
        registered = list(extensions)
        names: set[str] = set()
        for extension in registered:
            if not isinstance(extension, AgentExtension):
                raise TypeError(f"{extension!r} is not an AgentExtension")
            if extension.name in names:
                raise ValueError(
                    f"two extensions are named {extension.name!r}; names must be unique"
                )
            names.add(extension.name)
        tool_names: set[str] = set()
        for static_tool in tools:
            if static_tool.name in tool_names:
                raise ValueError(f"two tools are named {static_tool.name!r}")
            tool_names.add(static_tool.name)
        self.model = model
        self.system_prompt = system_prompt
        self.tools: tuple[AgentTool, ...] = tuple(tools)
        self.max_iterations = max_iterations
        self.extensions: tuple[AgentExtension, ...] = tuple(sort_by_priority(registered))
        self._hooks: dict[str, tuple[AgentExtension, ...]] = {
            hook: tuple(ext for ext in self.extensions if overrides(ext, hook))
            for hook in HOOK_NAMES
        }
        self._active: dict[str, AgentRunContext] = {}

    # -- public API ---------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """True while any request of this Agent is active."""
        return bool(self._active)

    def is_active(self, session_id: str) -> bool:
        return session_id in self._active

    def active_context(self, session_id: str) -> AgentRunContext | None:
        """The context of the session's active request, if any (for hosts and tests)."""
        return self._active.get(session_id)

    async def run(
        self, message: str | UserMessage, *, config: AgentRunConfig | None = None
    ) -> AssistantMessage:
        """Run one request to its final answer, discarding outward events."""
        return await self._open(message, config, None).execute()

    def start(self, message: str | UserMessage, config: AgentRunConfig | None = None) -> RunHandle:
        """Start one request and return its handle (see RunHandle); it runs as it is read.

        The session is claimed here, so a second concurrent request on it raises
        AgentProtocolError at once. Must be called with an event loop running.
        """
        driver: InlineDriver[AssistantMessage] = InlineDriver()
        return RunHandle(self, self._open(message, config, driver.hand_over), driver)

    def start_compaction(self, config: AgentRunConfig | None = None) -> RunHandle:
        """Start a compaction pass (as ``compact``) and return its handle, like ``start``.

        Its events are the compaction's; it is cancelled and awaited like a run, and it
        claims the session the same way. On success ``answer`` is None.
        """
        driver: InlineDriver[AssistantMessage] = InlineDriver()
        return RunHandle(self, self._open(None, config, driver.hand_over), driver, compaction=True)

    async def stream(
        self, message: str | UserMessage, *, config: AgentRunConfig | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Run one request and yield its outward events; closing the iterator cancels it.

        The run does not move past an event until the caller asks for the next one,
        so closing the iterator at any event cancels the run before its next step.
        The run's error propagates from the iterator after the last event.
        """
        driver: InlineDriver[AssistantMessage] = InlineDriver()
        driver.begin(self._open(message, config, driver.hand_over).execute())
        try:
            while (event := await driver.next()) is not None:
                yield event
            if driver.error is not None:
                raise driver.error
        finally:
            # Closed early: cancel where the run stopped (it has not moved past the
            # last event) and let it finish; nobody reads what the cancellation emits.
            await driver.cancel()

    async def compact(self, *, config: AgentRunConfig) -> list[AgentEvent]:
        """Restore the session (on_tool, on_state) and run on_compact; no input, no model.

        Returns the events extensions emitted during the pass.
        """
        emitted: list[AgentEvent] = []

        async def keep(event: AgentEvent) -> None:
            emitted.append(event)

        await self._open(None, config, keep).compact()
        return emitted

    def emit_external_event(
        self, event: ExternalEvent, *, config: AgentRunConfig | None = None
    ) -> list[str]:
        """Offer an external event to every extension's accept; return who took it.

        Without a config, the event belongs to the only active request if exactly
        one is active, and ``accept`` gets that request's config; with none or
        several active, it gets None (pass a config to address one session).
        Callable from any thread. An accept that raises is logged and counts as
        not accepted, so one broken extension cannot stop the others.
        """
        if not isinstance(event, ExternalEvent):
            raise TypeError("emit_external_event takes an ExternalEvent")
        if config is None:
            active = tuple(self._active.values())  # one C-level copy: safe off-loop
            if len(active) == 1:
                config = active[0].config
        accepted: list[str] = []
        for extension in self._hooks["accept"]:
            try:
                if extension.accept(config, event):
                    accepted.append(extension.name)
            except Exception:
                log.exception("extension %s failed in accept(%s)", extension.name, event.name)
        return accepted

    # -- one request --------------------------------------------------------------------

    def _open(
        self,
        message: str | UserMessage | None,
        config: AgentRunConfig | None,
        sink: OutwardSink,
    ) -> Request:
        """Claim the session and build the request's context (steps 1 and 2)."""
        if isinstance(message, str):
            message = UserMessage(message)
        elif message is not None and not isinstance(message, UserMessage):
            raise TypeError("run/stream take a str or a UserMessage")
        if config is None:
            config = AgentRunConfig()
        elif not isinstance(config, AgentRunConfig):
            raise TypeError("config must be an AgentRunConfig")
        if config.session_id is None or config.request_id is None:
            config = replace(
                config,
                session_id=config.session_id or new_uuid7(),
                request_id=config.request_id or new_uuid7(),
            )
        session_id = config.session_id
        assert session_id is not None
        if session_id in self._active:
            raise AgentProtocolError(f"session {session_id} already has an active request")
        context = AgentRunContext(
            config,
            AgentState(),
            {},
            self.extensions,
            self.model,
            input_message=message,
        )
        context._plumbing.subscribers = self._hooks["on_event"]
        request = Request(
            context,
            hooks=self._hooks,
            model=self.model,
            max_iterations=self.max_iterations,
            sink=sink,
            on_close=self._release,
        )
        self._active[session_id] = context
        track_requests(self.extensions, +1)
        for static_tool in self.tools:
            context.register_tool(static_tool)
        if self.system_prompt:
            context.add_message(SystemMessage(self.system_prompt, persist=False))
        return request

    def _release(self, request: Request) -> None:
        self._active.pop(request.context.session_id, None)
        track_requests(self.extensions, -1)
