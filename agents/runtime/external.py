"""ExternalEventExtension: a run waits for outside input, keyed by session and correlation id."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .events import ExtensionEvent, ExternalEvent, RunCancelledEvent
from .extension import AgentExtension

if TYPE_CHECKING:
    from .context import AgentRunContext
    from .state import AgentRunConfig

log = logging.getLogger(__name__)


class ExternalWaitClosed(Exception):
    """A wait ended without an answer because its request failed or was cancelled."""


@dataclass(slots=True, eq=False)
class _Wait:
    session_id: str
    request_id: str
    correlation_id: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    data: dict[str, Any] = field(default_factory=dict)  # what the run asked (for snapshots)
    answered: bool = False  # set under the lock by the first accepted answer


class ExternalEventExtension(AgentExtension):
    """Base for extensions whose runs wait for an operator or UI.

    A run opens a wait with ``open_wait`` (or directly awaits ``wait_for``),
    keyed by (session id, correlation id). ``accept`` may be called from any
    thread: it refuses events of another name, an unknown, already answered or
    foreign-session correlation id and payloads ``parse_response`` rejects, and
    otherwise wakes the run on its own loop. Failure or cancellation of the
    request closes every wait it opened.
    """

    #: ExternalEvent names this extension answers.
    event_names: ClassVar[frozenset[str]] = frozenset()
    #: Payload key holding the correlation id.
    correlation_field: ClassVar[str] = "id"

    def _waits_state(self) -> tuple[threading.Lock, dict[tuple[str, str], _Wait]]:
        state: tuple[threading.Lock, dict[tuple[str, str], _Wait]] | None = self.__dict__.get(
            "_external_waits"
        )
        if state is None:
            state = self.__dict__.setdefault("_external_waits", (threading.Lock(), {}))
        return state

    # -- run side ---------------------------------------------------------------------

    def open_wait(
        self, context: AgentRunContext, correlation_id: str, data: Mapping[str, Any] | None = None
    ) -> None:
        """Start waiting for an answer keyed by (session, correlation_id)."""
        lock, waits = self._waits_state()
        key = (context.session_id, correlation_id)
        loop = asyncio.get_running_loop()
        with lock:
            if key in waits:
                raise ValueError(f"a wait for {correlation_id!r} is already open in this session")
            waits[key] = _Wait(
                session_id=context.session_id,
                request_id=context.request_id,
                correlation_id=correlation_id,
                loop=loop,
                future=loop.create_future(),
                data=dict(data or {}),
            )

    async def wait_for(
        self,
        context: AgentRunContext,
        correlation_id: str,
        timeout: float | None = None,  # noqa: ASYNC109 -- public keyword; approval and ask_user use it
    ) -> Any:
        """Wait for the answer (opening the wait if needed); TimeoutError after timeout.

        The wait is removed on every path: answer, timeout, error, cancellation.
        """
        lock, waits = self._waits_state()
        key = (context.session_id, correlation_id)
        with lock:
            wait = waits.get(key)
        if wait is None:
            self.open_wait(context, correlation_id)
            with lock:
                wait = waits[key]
        try:
            done, _ = await asyncio.wait({wait.future}, timeout=timeout)
            if not done:
                with lock:
                    if not wait.answered:
                        wait.answered = True
                        raise TimeoutError(f"no answer for {correlation_id!r} within {timeout:g} s")
                # An answer was accepted just as the timeout fired: it is on its way.
            return await wait.future
        finally:
            with lock:
                if waits.get(key) is wait:
                    del waits[key]
            if not wait.future.done():
                wait.future.cancel()

    def pending_waits(self, session_id: str) -> list[dict[str, Any]]:
        """What the session's run waits for now: correlation ids and their data."""
        lock, waits = self._waits_state()
        with lock:
            return [
                {"id": wait.correlation_id, "request_id": wait.request_id, **wait.data}
                for (sid, _), wait in waits.items()
                if sid == session_id and not wait.answered
            ]

    def close_waits(self, session_id: str, request_id: str | None = None) -> int:
        """Wake and remove every open wait of a session (or of one of its requests)."""
        lock, waits = self._waits_state()
        closed: list[_Wait] = []
        with lock:
            for key, wait in list(waits.items()):
                if wait.session_id == session_id and (
                    request_id is None or wait.request_id == request_id
                ):
                    wait.answered = True
                    closed.append(waits.pop(key))
        for wait in closed:
            wait.loop.call_soon_threadsafe(_close_future, wait.future)
        return len(closed)

    def close_wait(self, session_id: str, correlation_id: str) -> bool:
        """Wake and remove one wait, answered or not; False when none was open.

        For a wait the run will never await, e.g. an approval of a tool call that
        steering skipped, so the request need not end for it to disappear.
        """
        lock, waits = self._waits_state()
        with lock:
            wait = waits.pop((session_id, correlation_id), None)
            if wait is None:
                return False
            wait.answered = True
        wait.loop.call_soon_threadsafe(_close_future, wait.future)
        return True

    # -- answer side ------------------------------------------------------------------

    def parse_response(self, payload: Mapping[str, Any]) -> Any:
        """Validate an answer's payload; raise ValueError to refuse it. Default: as is."""
        return dict(payload)

    def accept(self, config: AgentRunConfig | None, event: ExternalEvent) -> bool:
        if event.name not in self.event_names or config is None or config.session_id is None:
            return False
        correlation_id = event.payload.get(self.correlation_field)
        if not isinstance(correlation_id, str) or not correlation_id:
            return False
        try:
            value = self.parse_response(event.payload)
        except (ValueError, TypeError) as exc:
            log.info("refused %s answer for %s: %s", event.name, correlation_id, exc)
            return False
        lock, waits = self._waits_state()
        with lock:
            wait = waits.get((config.session_id, correlation_id))
            if wait is None or wait.answered:
                return False
            if config.request_id is not None and config.request_id != wait.request_id:
                return False
            wait.answered = True
        wait.loop.call_soon_threadsafe(_resolve_future, wait.future, value)
        return True

    # -- cleanup ------------------------------------------------------------------------

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        if isinstance(event, RunCancelledEvent):
            self.close_waits(event.session_id, event.request_id)

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        self.close_waits(context.session_id, context.request_id)

    async def after_run(self, context: AgentRunContext, result: Any) -> None:
        self.close_waits(context.session_id, context.request_id)


def _resolve_future(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _close_future(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(ExternalWaitClosed("the request ended before an answer arrived"))
        # Waits opened ahead (one per tool call of a turn) may never be awaited; marking
        # the exception retrieved keeps asyncio from logging it. An awaiter still gets it.
        future.exception()
