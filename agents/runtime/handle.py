"""RunHandle: one started request, its outward events handed over one at a time, its outcome."""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

from .errors import AgentProtocolError
from .events import AgentEvent, ExternalEvent

if TYPE_CHECKING:
    from .agent import Agent
    from .context import AgentRunContext
    from .messages import AssistantMessage, UserMessage
    from .request import Request
    from .state import AgentRunConfig


class HandOff:
    """Outward events from the run task to its one reader, without running ahead.

    ``put`` returns only when the reader asks for the event after this one, so the
    run never moves past an event the reader is still handling, and a reader that
    stops reading stops the run right there. Events of a finished, failed or
    cancelled request (phase terminal) are only queued: nothing follows them that
    could run ahead, and they must not wait for a reader that may be gone.
    """

    __slots__ = ("_handed", "_items", "_reader", "finished")

    def __init__(self) -> None:
        self._items: deque[tuple[AgentEvent, asyncio.Future[None] | None]] = deque()
        self._reader: asyncio.Future[None] | None = None  # the reader waiting for an event
        self._handed: asyncio.Future[None] | None = None  # the run waiting on the last one
        self.finished = False  # the run task ended; what is queued is all there is

    async def put(self, event: AgentEvent) -> None:
        if event.phase.terminal:
            self._items.append((event, None))
            self._wake_reader()
            return
        taken = asyncio.get_running_loop().create_future()
        self._items.append((event, taken))
        self._wake_reader()
        await taken

    def finish(self) -> None:
        self.finished = True
        self._wake_reader()

    async def get(self) -> AgentEvent | None:
        """The next event, or None after the last; asking releases the previous one."""
        handed = self._handed
        if handed is not None:
            self._handed = None
            if not handed.done():
                handed.set_result(None)
        items = self._items
        while not items:
            if self.finished:
                return None
            reader = asyncio.get_running_loop().create_future()
            self._reader = reader
            try:
                await reader
            finally:
                self._reader = None
        event, self._handed = items.popleft()
        return event

    def _wake_reader(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)


class RunHandle:
    """One started request (``Agent.start``): read its events, steer it, stop it, await it.

    The run advances only as its events are read: read ``events()`` to the end, or
    ``await wait()``, which discards the events when nobody else reads them. Used as
    an async context manager, leaving the block cancels a run that has not finished
    and waits for it. Without one, the caller must read to the end, wait or cancel,
    or the run stays paused at its next event holding its session.
    """

    __slots__ = ("_agent", "_getting", "_handoff", "_readers", "_request", "_task")

    def __init__(self, agent: Agent, request: Request, handoff: HandOff) -> None:
        self._agent = agent
        self._request = request
        self._handoff = handoff
        self._readers = 0  # events() iterators neither exhausted nor closed
        self._getting = False  # one reader at a time takes the next event
        self._task = asyncio.get_running_loop().create_task(
            request.execute(), name=f"agent-run-{request.context.request_id}"
        )
        self._task.add_done_callback(self._finished)

    # -- what it is ---------------------------------------------------------------------

    @property
    def context(self) -> AgentRunContext:
        """The live context of this request (its state, tools and steering intake)."""
        return self._request.context

    @property
    def config(self) -> AgentRunConfig:
        """The request's config, with session_id and request_id filled in."""
        return self._request.context.config

    @property
    def session_id(self) -> str:
        return self._request.context.session_id

    @property
    def request_id(self) -> str:
        return self._request.context.request_id

    # -- its events -----------------------------------------------------------------------

    def events(self) -> RunEvents:
        """The outward events, to the end, including those of cancellation.

        The run waits while the reader handles an event, so it never runs ahead of
        it. The iterator ends normally whatever the outcome (see ``result()``).
        ``aclose()`` before the end cancels the run; a later ``events()`` then yields
        what the cancellation emitted (open tool calls as TOOL_FAILED, extensions'
        events). Leaving an ``async for`` with ``break`` only pauses the run: the next
        ``events()`` continues where the last one stopped.
        """
        return RunEvents(self)

    async def wait(self) -> None:
        """Wait until the run has ended; never raises the run's error (see ``result``).

        When no ``events()`` iterator is open (neither exhausted nor closed), the
        events are consumed and discarded here, so a run nobody reads still advances.
        """
        if self._readers:
            await asyncio.wait({self._task})
            return
        while await self._next() is not None:
            pass

    def cancel(self) -> bool:
        """Ask the run to stop; False when it has already ended. Read on for its events."""
        if self._task.done():
            return False
        self._task.cancel()
        return True

    def emit_external_event(self, event: ExternalEvent) -> list[str]:
        """Offer an external event to the extensions with this run's config; who took it."""
        return self._agent.emit_external_event(event, config=self.config)

    # -- its outcome ----------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._task.done()

    @property
    def cancelled(self) -> bool:
        return self._task.cancelled()

    @property
    def error(self) -> BaseException | None:
        """The exception the run failed with; None while running, on success or cancel."""
        task = self._task
        if not task.done() or task.cancelled():
            return None
        return task.exception()

    @property
    def answer(self) -> AssistantMessage | None:
        """The final answer of a successful run, else None."""
        task = self._task
        if not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def result(self) -> AssistantMessage:
        """The final answer; raises the run's error, or CancelledError if it was cancelled."""
        if not self._task.done():
            raise AgentProtocolError("the run has not finished; await wait() first")
        return self._task.result()

    @property
    def unprocessed_steering(self) -> tuple[UserMessage, ...]:
        """Steering messages offered to the run but not taken before it ended."""
        return self._request.unprocessed_steering

    # -- context manager ----------------------------------------------------------------

    async def __aenter__(self) -> RunHandle:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cancel()
        await self.wait()

    # -- internals ------------------------------------------------------------------------

    async def _next(self) -> AgentEvent | None:
        if self._getting:
            raise AgentProtocolError("this run's next event already has a reader")
        self._getting = True
        try:
            return await self._handoff.get()
        finally:
            self._getting = False

    def _finished(self, task: asyncio.Task[AssistantMessage]) -> None:
        if task.cancelled():
            # Cancelled before its first step: the request never ran, so no hook has
            # anything to clean up, but the session must still be given back.
            self._request.close()
        else:
            task.exception()  # retrieved: the outcome is read through result() and error
        self._handoff.finish()


class RunEvents:
    """An async iterator over one run's outward events (see ``RunHandle.events``)."""

    __slots__ = ("_handle", "_open")

    def __init__(self, handle: RunHandle) -> None:
        self._handle = handle
        self._open = True
        handle._readers += 1

    def __aiter__(self) -> RunEvents:
        return self

    async def __anext__(self) -> AgentEvent:
        if self._open:
            event = await self._handle._next()
            if event is not None:
                return event
            self._close()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop reading; a run that has not ended is cancelled."""
        if self._open:
            self._close()
            self._handle.cancel()

    def _close(self) -> None:
        self._open = False
        self._handle._readers -= 1
