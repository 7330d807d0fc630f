"""AgentRunContext: the per-request references every lifecycle hook shares."""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import AgentProtocolError
from .events import (
    EXTENSION_EMITTABLE,
    AgentEvent,
    EventSubscriber,
    ExtensionEvent,
    MessageAppendedEvent,
    MessageTiming,
)
from .messages import MESSAGE_TYPES, AnyMessage, UserMessage
from .model import ModelUsage
from .state import AgentRunConfig, AgentState
from .tools import AgentTool, ServerToolDefinition

EventSink = Callable[[AgentEvent], Awaitable[None]]


class RequestPlumbing:
    """The runtime's private wiring of one context, kept out of its public signature."""

    __slots__ = ("sink", "steering", "steering_closed", "steering_lock", "subscribers")

    def __init__(self) -> None:
        self.subscribers: tuple[EventSubscriber, ...] | None = None  # on_event overriders
        self.sink: EventSink | None = None  # the runtime's outward stamping sink
        self.steering: deque[UserMessage] = deque()  # offered, taken at safe points
        self.steering_lock = threading.Lock()  # offers arrive from any thread
        self.steering_closed = False  # the final turn ended: later steering needs a new run


@dataclass(eq=False, slots=True)
class AgentRunContext:
    """Per-request references shared by all hooks: config, state, tool registries.

    Identity is request-scoped, so a context may key temporary extension state as
    long as every success, error and cancellation path removes the entry.
    """

    config: AgentRunConfig
    state: AgentState
    tools: dict[str, AgentTool]  # local tools of this request, by name
    extensions: Sequence[EventSubscriber] = ()  # in hook order
    model: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, Any] = field(default_factory=dict)
    input_message: UserMessage | None = None  # pending input, replaced by on_message
    server_tools: dict[str, ServerToolDefinition] = field(default_factory=dict)  # by type
    event_queue: deque[AgentEvent] = field(default_factory=deque)  # emitted, not yet sent
    _pending_message_events: list[tuple[AnyMessage, ModelUsage | None]] = field(
        default_factory=list
    )
    _plumbing: RequestPlumbing = field(default_factory=RequestPlumbing, init=False, repr=False)

    # -- identity -----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session of this request; always set once a context exists."""
        session_id = self.config.session_id
        if session_id is None:
            raise AgentProtocolError("context has no session_id (the runtime fills it in)")
        return session_id

    @property
    def request_id(self) -> str:
        request_id = self.config.request_id
        if request_id is None:
            raise AgentProtocolError("context has no request_id (the runtime fills it in)")
        return request_id

    # -- outward and internal events ---------------------------------------------------

    async def emit(self, event: AgentEvent) -> None:
        """Send one extension-owned CUSTOM or compaction event to the caller."""
        if not isinstance(event, AgentEvent):
            raise TypeError("emit takes an AgentEvent")
        if event.type not in EXTENSION_EMITTABLE:
            raise AgentProtocolError(
                f"extensions may emit only CUSTOM and compaction events, not {event.type.name}"
            )
        sink = self._plumbing.sink
        if sink is not None:
            await sink(event)
        else:
            self.event_queue.append(event)

    async def publish(self, event: ExtensionEvent, *, target: str | None = None) -> None:
        """Deliver an event to every extension's on_event in order, or to one by name.

        An unknown or ambiguous target raises ValueError and delivers nothing. A
        handler error propagates and stops delivery; finished work is kept.
        """
        if target is not None:
            matches = [ext for ext in self.extensions if ext.name == target]
            if len(matches) != 1:
                problem = "unknown" if not matches else "ambiguous"
                raise ValueError(f"{problem} publish target {target!r}")
            await matches[0].on_event(self, event)
            return
        subscribers = self._plumbing.subscribers
        if subscribers is None:
            # Outside an Agent nobody filtered the list; the base on_event is a no-op.
            subscribers = tuple(self.extensions)
        for extension in subscribers:
            await extension.on_event(self, event)

    # -- tools ----------------------------------------------------------------------

    def register_tool(self, tool: AgentTool) -> None:
        """Register one request-scoped tool; a name already registered is refused."""
        if not isinstance(tool, AgentTool):
            raise TypeError("register_tool takes an AgentTool (see @tool)")
        if tool.name in self.tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered for this request")
        self.tools[tool.name] = tool.copy()

    def register_server_tool(self, tool: ServerToolDefinition) -> None:
        """Register one provider-hosted tool; its configuration is copied."""
        if not isinstance(tool, ServerToolDefinition):
            raise TypeError("register_server_tool takes a ServerToolDefinition")
        if tool.type in self.server_tools:
            raise ValueError(
                f"a server tool of type {tool.type!r} is already registered for this request"
            )
        self.server_tools[tool.type] = ServerToolDefinition(
            type=tool.type, configuration=copy.deepcopy(dict(tool.configuration))
        )

    # -- messages -------------------------------------------------------------------

    async def append_message(
        self,
        message: AnyMessage,
        timing: MessageTiming | None,
        usage: ModelUsage | None = None,
    ) -> None:
        """Append one produced message, then notify subscribers (it is visible first).

        Subscriber failures propagate and do not roll the append back.
        """
        _check_message(message)
        messages = self.state.messages
        messages.append(message)
        await self.publish(MessageAppendedEvent(message, timing, usage, len(messages) - 1))

    def add_message(
        self, message: AnyMessage, *, index: int | None = None, usage: ModelUsage | None = None
    ) -> None:
        """Add one extension-owned message and queue its append event for the next flush."""
        _check_message(message)
        messages = self.state.messages
        if any(existing is message for existing in messages):
            raise ValueError("this message object is already in the context")
        if index is None:
            messages.append(message)
        else:
            messages.insert(index, message)
        self._pending_message_events.append((message, usage))

    def replace_messages(self, messages: Iterable[AnyMessage], *, emit_new: bool = True) -> None:
        """Replace the model context; queue events for newly added messages if emit_new."""
        replacement = list(messages)
        for message in replacement:
            _check_message(message)
        if emit_new:
            before = {id(message) for message in self.state.messages}
            for message in replacement:
                if id(message) not in before:
                    self._pending_message_events.append((message, None))
        self.state.messages[:] = replacement

    def add_message_event(self, message: AnyMessage, usage: ModelUsage | None = None) -> None:
        """Queue one append event for a message already present in state."""
        if not any(existing is message for existing in self.state.messages):
            raise ValueError("add_message_event needs a message that is already in the context")
        self._pending_message_events.append((message, usage))

    async def flush_message_events(self) -> None:
        """Publish every queued message event exactly once, in state order.

        Events of messages no longer in state are dropped. If a subscriber fails,
        the events not yet published stay queued for the next flush.
        """
        pending = self._pending_message_events
        if not pending:
            return
        self._pending_message_events = []
        positions = {id(message): index for index, message in enumerate(self.state.messages)}
        ordered: dict[int, tuple[int, AnyMessage, ModelUsage | None]] = {}
        for message, usage in pending:
            index = positions.get(id(message))
            if index is None:
                continue
            key = id(message)
            if key in ordered:
                usage = usage or ordered[key][2]
            ordered[key] = (index, message, usage)
        queue = sorted(ordered.values(), key=lambda item: item[0])
        for position, (index, message, usage) in enumerate(queue):
            try:
                await self.publish(MessageAppendedEvent(message, None, usage, index))
            except BaseException:
                self._pending_message_events[:0] = [(m, u) for _, m, u in queue[position + 1 :]]
                raise

    # -- steering ---------------------------------------------------------------------

    def offer_steering(self, message: UserMessage) -> bool:
        """Queue a message for the runtime's next safe point; callable from any thread.

        Returns False once the request has finished its last turn, so the caller
        knows the message was not taken and must start (or queue) a new request.
        """
        if not isinstance(message, UserMessage):
            raise TypeError("steering takes a UserMessage")
        plumbing = self._plumbing
        with plumbing.steering_lock:
            if plumbing.steering_closed:
                return False
            plumbing.steering.append(message)
            return True

    @property
    def steering_pending(self) -> bool:
        return bool(self._plumbing.steering)

    def close_steering(self) -> list[UserMessage]:
        """Refuse further steering and return what was offered but never taken."""
        plumbing = self._plumbing
        with plumbing.steering_lock:
            plumbing.steering_closed = True
            leftover = list(plumbing.steering)
            plumbing.steering.clear()
            return leftover

    def take_steering(self, *, close_if_empty: bool) -> list[UserMessage]:
        """Take every queued steering message (the runtime's safe point).

        With ``close_if_empty`` and nothing queued, intake closes: the request has
        finished its last turn, so later steering must start a new request.
        """
        plumbing = self._plumbing
        with plumbing.steering_lock:
            taken = list(plumbing.steering)
            plumbing.steering.clear()
            if close_if_empty and not taken:
                plumbing.steering_closed = True
            return taken


def _check_message(message: object) -> None:
    if not isinstance(message, MESSAGE_TYPES):
        raise TypeError(f"expected a message, got {type(message).__name__}")
