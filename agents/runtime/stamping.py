"""Stamper: numbers one request's outward events and stamps ids and phase on each."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import replace
from typing import Any

from .context import AgentRunContext
from .events import AgentEvent, AgentEventType, AgentPhase

#: Where outward events go; None when nobody reads them (``Agent.run``).
OutwardSink = Callable[[AgentEvent], Awaitable[None]] | None


class _Nothing:
    """An awaitable that completes at once: the sink when nobody reads events."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that stops at once


_NOTHING = _Nothing()


class Stamper:
    """Stamps session, request, seq (from 1) and phase on the runtime's and extensions' events.

    Awaiting what ``out`` returns hands the event to the sink, which may wait until a
    reader took it. Without a sink, seq still advances so numbering never depends on
    whether anyone reads.
    """

    __slots__ = ("_compaction_resumes", "_request_id", "_seq", "_session_id", "_sink", "_state")

    def __init__(self, context: AgentRunContext, sink: OutwardSink) -> None:
        self._sink = sink
        self._state = context.state
        self._session_id = context.session_id  # fixed for the request
        self._request_id = context.request_id
        self._seq = 0
        self._compaction_resumes: AgentPhase | None = None  # where a compaction returns to

    def out(self, event_type: AgentEventType, **fields: Any) -> Awaitable[None]:
        """One runtime event; a plain function returning the sink's awaitable, for speed."""
        self._seq += 1
        sink = self._sink
        if sink is None:
            return _NOTHING
        return sink(
            AgentEvent(
                event_type,
                self._session_id,
                self._request_id,
                self._seq,
                self._state.phase,
                **fields,
            )
        )

    async def from_extension(self, event: AgentEvent) -> None:
        """One event an extension emitted (CUSTOM or compaction: the context checked)."""
        self._seq += 1
        state = self._state
        # A compaction inside a request is a phase of its own: COMPACTION_STARTED enters
        # it, COMPACTION_COMPLETED (still stamped COMPACTING) returns to where it was.
        kind = event.type
        resumes: AgentPhase | None = None
        if kind is AgentEventType.COMPACTION_STARTED and state.phase is not AgentPhase.COMPACTING:
            self._compaction_resumes = state.phase
            state.phase = AgentPhase.COMPACTING
        elif kind is AgentEventType.COMPACTION_COMPLETED:
            resumes, self._compaction_resumes = self._compaction_resumes, None
        phase = state.phase
        if resumes is not None:
            state.phase = resumes
        sink = self._sink
        if sink is None:
            return
        await sink(
            replace(
                event,
                session_id=self._session_id,
                request_id=self._request_id,
                seq=self._seq,
                phase=phase,
                iteration=event.iteration or state.iteration,
            )
        )
