"""RunHandle: one started request, driven by whoever reads its events, and its outcome."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING

from .drive import InlineDriver
from .errors import AgentProtocolError
from .events import AgentEvent, ExternalEvent

if TYPE_CHECKING:
    from .agent import Agent
    from .context import AgentRunContext
    from .messages import AssistantMessage, UserMessage
    from .request import Request
    from .state import AgentRunConfig


class RunHandle:
    """One started request (``Agent.start``): read its events, steer it, stop it, await it.

    The run advances only as its events are read: read ``events()`` to the end, or
    ``await wait()``, which discards the events when nobody else reads them. It runs
    inside the reading task, one event at a time (see ``drive.InlineDriver``), so
    handing an event over costs no task switch. Used as an async context manager,
    leaving the block cancels a run that has not finished and waits for it. Without
    one, the caller must read to the end, wait or cancel, or the run stays paused at
    its next event holding its session.
    """

    __slots__ = (
        "_agent",
        "_cancel_pending",
        "_driver",
        "_ended",
        "_getting",
        "_readers",
        "_reading_in",
        "_request",
        "_started",
    )

    def __init__(
        self,
        agent: Agent,
        request: Request,
        driver: InlineDriver[AssistantMessage],
        *,
        compaction: bool = False,
    ) -> None:
        self._agent = agent
        self._request = request
        self._driver = driver
        self._readers = 0  # events() iterators neither exhausted nor closed
        self._getting = False  # one reader at a time takes the next event
        self._reading_in: asyncio.Task[object] | None = None  # the task inside the run now
        self._cancel_pending = False  # cancel() asked while nobody was inside the run
        self._started = False
        self._ended = asyncio.Event()
        # A compaction pass (Agent.start_compaction) ends with no answer: ``answer`` is None.
        driver.begin(request.compact() if compaction else request.execute())  # type: ignore[arg-type]

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

        When no ``events()`` iterator is open (neither exhausted nor closed), or the run
        was cancelled and nobody is reading it, the events are consumed and discarded
        here, so such a run still advances to its end.
        """
        while not self._driver.done:
            if self._getting or (self._readers and not self._cancel_pending):
                await self._ended.wait()  # its reader drives it
                return
            await self._next()

    def cancel(self) -> bool:
        """Ask the run to stop; False when it has already ended. Read on for its events."""
        if self._driver.done:
            return False
        if not self._started and not self._getting:
            # Not begun: no hook ran, so there is nothing to clean up but the session.
            self._end_unstarted()
            return True
        reading = self._reading_in
        if reading is not None and reading is not asyncio.current_task():
            # The reader is inside the run, suspended where the run waits: interrupt it
            # there, as cancelling a task of its own would, and keep what it emits.
            self._driver.keep_cancelled = True
            reading.cancel()
        else:
            self._cancel_pending = True  # thrown into the run at the next read
        return True

    def emit_external_event(self, event: ExternalEvent) -> list[str]:
        """Offer an external event to the extensions with this run's config; who took it."""
        return self._agent.emit_external_event(event, config=self.config)

    # -- its outcome ----------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._driver.done

    @property
    def cancelled(self) -> bool:
        return self._driver.done and isinstance(self._driver.error, asyncio.CancelledError)

    @property
    def error(self) -> BaseException | None:
        """The exception the run failed with; None while running, on success or cancel."""
        error = self._driver.error
        if not self._driver.done or isinstance(error, asyncio.CancelledError):
            return None
        return error

    @property
    def answer(self) -> AssistantMessage | None:
        """The final answer of a successful run, else None."""
        driver = self._driver
        return driver.result if driver.done and driver.error is None else None

    def result(self) -> AssistantMessage:
        """The final answer; raises the run's error, or CancelledError if it was cancelled."""
        driver = self._driver
        if not driver.done:
            raise AgentProtocolError("the run has not finished; await wait() first")
        if driver.error is not None:
            raise driver.error
        assert driver.result is not None
        return driver.result

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
        driver = self._driver
        if driver.done:
            return None
        self._getting = True
        task = asyncio.current_task()
        self._reading_in = task
        throw: BaseException | None = None
        if self._cancel_pending:
            self._cancel_pending = False
            driver.keep_cancelled = True
            throw = asyncio.CancelledError()
        self._started = True
        try:
            event = await driver.next(throw)
        finally:
            self._getting = False
            self._reading_in = None
            if driver.keep_cancelled and task is not None and task.cancelling():
                task.uncancel()  # cancel() cancelled the run, not this reader
        if driver.done:
            self._ended.set()
        return event

    def _end_unstarted(self) -> None:
        driver = self._driver
        driver.done = True
        driver.error = asyncio.CancelledError()
        coro = driver._coro
        if coro is not None:
            coro.close()
        self._request.close()
        self._ended.set()


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
