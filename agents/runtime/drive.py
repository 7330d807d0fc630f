"""InlineDriver: runs a request's coroutine inside the reading task, one event at a time.

``Agent.stream`` uses it so that backpressure costs no task switch: the run hands an
event over by suspending its own coroutine with a marker the driver recognises, the
driver gives the event to the reader, and the run resumes only when the reader asks
for the next one. Every other suspension (a future, a bare yield) is passed up to
the reading task unchanged, and whatever the task is resumed with (a result, an
exception, a cancellation) is passed back down, so the run behaves as it would in a
task of its own. Cancelling the reading task cancels the run: the driver lets the
run finish its cancellation (discarding what it emits) and re-raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

from .events import AgentEvent, AgentPhase

T = TypeVar("T")


class _HandOver:
    """What the run awaits to hand one event over; reused for every event."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event: AgentEvent | None = None

    def __await__(self) -> Generator[Any, None, None]:
        yield self


class _PassUp:
    """Suspends the reading task on whatever the run suspended on."""

    __slots__ = ("yielded",)

    def __init__(self, yielded: Any) -> None:
        self.yielded = yielded

    def __await__(self) -> Generator[Any, None, None]:
        yield self.yielded


class InlineDriver(Generic[T]):
    """Drives one coroutine from the caller's task; see the module docstring."""

    __slots__ = ("_coro", "_draining", "_handover", "done", "error", "keep_cancelled", "result")

    def __init__(self) -> None:
        self._handover = _HandOver()
        self._coro: Coroutine[Any, Any, T] | None = None
        self._draining = False  # finishing a cancellation: events are dropped
        # True while a cancellation of the reading task means "cancel the run and hand me
        # what it emits" (RunHandle.cancel) rather than "the reader is gone".
        self.keep_cancelled = False
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None  # what the run raised, cancellation included

    def hand_over(self, event: AgentEvent) -> _HandOver:
        """The run's outward sink: ``await driver.hand_over(event)``."""
        handover = self._handover
        handover.event = event
        return handover

    def begin(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro

    async def cancel(self) -> None:
        """Cancel the run where it stopped and drive it to its end, discarding events."""
        if self.done:
            return
        self._draining = True
        await self.next(asyncio.CancelledError())

    async def next(self, throw: BaseException | None = None) -> AgentEvent | None:
        """Run until the next handed-over event (returned) or the end (None).

        ``throw`` is raised inside the run where it stopped (used to cancel it).
        """
        coro = self._coro
        assert coro is not None, "begin() first"
        if self.done:
            return None
        handover = self._handover
        passed_cancel: asyncio.CancelledError | None = None
        while True:
            try:
                yielded = coro.send(None) if throw is None else coro.throw(throw)
            except StopIteration as stop:
                self.done = True
                self.result = stop.value
                return None
            except BaseException as error:
                self.done = True
                self.error = error
                return None
            throw = None
            if yielded is handover:
                event: AgentEvent | None = self._handover.event
                assert event is not None
                if passed_cancel is not None and self.keep_cancelled:
                    passed_cancel = None  # the reader asked for the run's cancellation
                if passed_cancel is not None and event.phase is AgentPhase.CANCELLED:
                    # The run is cancelling because our task was: nobody reads on, so
                    # let it finish (its events are dropped) and propagate.
                    self._draining = True
                    while not self.done:
                        await self.next()
                    raise passed_cancel
                if not self._draining:
                    return event
                continue
            try:
                await _PassUp(yielded)
            except asyncio.CancelledError as cancelled:
                # As in a task of its own, the run decides: a timeout inside it may
                # turn this into TimeoutError; otherwise it cancels (see above).
                throw = passed_cancel = cancelled
            except BaseException as error:
                throw = error  # the future the run awaited failed: the run gets its error
