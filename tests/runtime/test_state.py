"""AgentRunConfig: frozen, blank ids become None, the runtime fills missing ids with UUIDv7;
AgentState: what the runtime records for hooks (the first chunk's time)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents.providers.scripted import ScriptedModel
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ToolCall,
    tool,
)

from .conftest import collect


def test_run_config_is_frozen() -> None:
    config = AgentRunConfig(session_id="s")

    with pytest.raises(dataclasses.FrozenInstanceError):
        config.session_id = "other"  # type: ignore[misc]


@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
def test_blank_ids_become_none(blank: str) -> None:
    config = AgentRunConfig(session_id=blank, request_id=blank, parent_session_id=blank)

    assert (config.session_id, config.request_id, config.parent_session_id) == (None, None, None)


class ConfigSpy(AgentExtension):
    def __init__(self) -> None:
        self.configs: list[AgentRunConfig] = []

    async def on_tool(self, context: AgentRunContext) -> None:
        self.configs.append(context.config)


def is_uuid7(value: str | None) -> bool:
    return value is not None and uuid.UUID(value).version == 7


async def test_runtime_fills_missing_ids_with_uuid7() -> None:
    spy = ConfigSpy()
    agent = Agent(ScriptedModel(["One.", "Two."]), extensions=[spy])

    first = await collect(agent, "hi")
    second = await collect(agent, "hi", AgentRunConfig(session_id="  "))

    (filled_first, filled_second) = spy.configs
    for filled in spy.configs:
        assert is_uuid7(filled.session_id) and is_uuid7(filled.request_id)
    assert filled_first.session_id != filled_second.session_id
    assert filled_first.request_id != filled_second.request_id
    assert first[0].session_id == filled_first.session_id
    assert second[0].request_id == filled_second.request_id


async def test_given_ids_are_kept_and_a_missing_request_id_is_made_per_request() -> None:
    spy = ConfigSpy()
    agent = Agent(ScriptedModel(["One.", "Two."]), extensions=[spy])
    config = AgentRunConfig(session_id="chat", parent_session_id="parent")

    await agent.run("a", config=config)
    await agent.run("b", config=config)

    assert [c.session_id for c in spy.configs] == ["chat", "chat"]
    assert [c.parent_session_id for c in spy.configs] == ["parent", "parent"]
    assert all(is_uuid7(c.request_id) for c in spy.configs)
    assert spy.configs[0].request_id != spy.configs[1].request_id
    assert config.request_id is None


class TwoCalls:
    """Call 1 streams two deltas and asks for a tool; call 2 answers with no delta at all."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        if self.calls == 1:
            yield ModelEvent.text("Let me ")
            yield ModelEvent.text("check.")
            call = ToolCall("c1", "echo", {"text": "x"})
            yield ModelEvent.completed(ModelResponse(AssistantMessage("", tool_calls=(call,))))
        else:
            yield ModelEvent.completed(ModelResponse(AssistantMessage("Done.")))


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


class FirstChunkSpy(AgentExtension):
    def __init__(self) -> None:
        self.windows: list[tuple[float, float | None, float]] = []
        self._called_at = 0.0

    def on_model_request(  # type: ignore[override]
        self, context: AgentRunContext, request: ModelRequest, call_next: Any
    ) -> AsyncIterator[ModelEvent]:
        self._called_at = time.monotonic()
        return call_next(request)  # type: ignore[no-any-return]

    async def after_model(self, context: AgentRunContext, response: ModelResponse) -> None:
        self.windows.append((self._called_at, context.state.first_chunk_at, time.monotonic()))


async def test_first_chunk_at_is_when_this_model_call_streamed_its_first_delta() -> None:
    spy = FirstChunkSpy()
    agent = Agent(TwoCalls(), tools=[echo], extensions=[spy])

    await collect(agent, "hi")

    (called, first, answered), (_, none_yet, _) = spy.windows
    assert first is not None and called <= first <= answered
    assert none_yet is None  # reset for every call: the answer streamed no delta
