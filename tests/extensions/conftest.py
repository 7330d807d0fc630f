"""Fixtures for the operator-facing extensions: streamed runs, gated tools, loop hygiene."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentRunConfig,
    AgentTool,
    AssistantMessage,
    ToolMessage,
    UserMessage,
    tool,
)

SAFETY_NET = 5.0  # seconds; only a broken runtime ever reaches it


class StreamedRun:
    """One request streamed in a background task; the test waits for events it expects."""

    def __init__(self, agent: Agent, message: str | UserMessage, config: AgentRunConfig) -> None:
        self.config = config
        self.events: list[AgentEvent] = []
        self._changed = asyncio.Event()
        self.task: asyncio.Task[AssistantMessage] = asyncio.get_running_loop().create_task(
            self._consume(agent, message, config)
        )

    async def _consume(
        self, agent: Agent, message: str | UserMessage, config: AgentRunConfig
    ) -> AssistantMessage:
        final: AssistantMessage | None = None
        try:
            async for event in agent.stream(message, config=config):
                self.events.append(event)
                self._changed.set()
                if event.type is AgentEventType.RUN_COMPLETED:
                    assert isinstance(event.message, AssistantMessage)
                    final = event.message
        finally:
            self._changed.set()
        assert final is not None, "the stream ended without RUN_COMPLETED"
        return final

    async def until(self, predicate: Callable[[AgentEvent], bool]) -> AgentEvent:
        """The first event (already seen or still to come) matching predicate."""

        async def scan() -> AgentEvent:
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                if self.task.done():
                    self.task.result()  # a failure explains the missing event best
                    raise AssertionError("the run ended without the expected event")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(scan(), SAFETY_NET)

    async def until_custom(self, name: str, **data: Any) -> AgentEvent:
        """The first CUSTOM event with this name whose data contains these items."""
        return await self.until(
            lambda event: (
                event.type is AgentEventType.CUSTOM
                and event.name == name
                and all(event.data.get(key) == value for key, value in data.items())
            )
        )

    def custom(self, name: str) -> list[dict[str, Any]]:
        """Data of every CUSTOM event with this name, in order."""
        return [
            dict(event.data)
            for event in self.events
            if event.type is AgentEventType.CUSTOM and event.name == name
        ]

    def of_type(self, event_type: AgentEventType) -> list[AgentEvent]:
        return [event for event in self.events if event.type is event_type]

    def tool_messages(self) -> list[ToolMessage]:
        """The ToolMessages the run settled, from its TOOL_* events, in order."""
        settled = (
            AgentEventType.TOOL_COMPLETED,
            AgentEventType.TOOL_FAILED,
            AgentEventType.TOOL_SKIPPED,
        )
        return [
            event.message
            for event in self.events
            if event.type in settled and isinstance(event.message, ToolMessage)
        ]

    async def result(self) -> AssistantMessage:
        return await asyncio.wait_for(self.task, SAFETY_NET)


class ProbeTool:
    """A tool named ``name`` taking ``target: str`` that records each run.

    With ``blocking=True`` a run waits for ``release`` (an asyncio.Event) after recording,
    so a test can act while the tool is known to be running.
    """

    def __init__(self, name: str, *, blocking: bool = False) -> None:
        self.name = name
        self.targets: list[str] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        if not blocking:
            self.release.set()

        async def run(target: str) -> str:
            self.targets.append(target)
            self.started.set()
            await self.release.wait()
            return f"{name} ran on {target}"

        run.__doc__ = f"Run {name} on a target."
        self.tool: AgentTool = tool(name=name)(run)


@pytest.fixture
async def start_run() -> AsyncIterator[Callable[..., StreamedRun]]:
    """Start streamed runs; any still going when the test ends is cancelled and awaited."""
    runs: list[StreamedRun] = []

    def start(
        agent: Agent, message: str | UserMessage = "Go.", *, config: AgentRunConfig
    ) -> StreamedRun:
        run = StreamedRun(agent, message, config)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if not run.task.done():
            run.task.cancel()
        await asyncio.wait({run.task})
        if not run.task.cancelled():
            run.task.exception()


@pytest.fixture(autouse=True)
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """Fail a test whose loop reported an error, e.g. an exception nobody retrieved."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    gc.collect()  # unreferenced futures report unretrieved exceptions when collected
    await asyncio.sleep(0)
    loop.set_exception_handler(previous)
    assert errors == []


@pytest.fixture
def session() -> AgentRunConfig:
    """The session most tests run in, with a fixed request id."""
    return AgentRunConfig(session_id="session-a", request_id="request-a1")
