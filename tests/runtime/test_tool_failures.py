"""Failed tool calls: after_tool gets the exception; unknown names never enter on_tool_call."""

from __future__ import annotations

from typing import Any

from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentRunContext,
    AssistantMessage,
    ToolArgumentsError,
    ToolCall,
    ToolMessage,
    ToolResult,
    UnknownToolError,
)

from .conftest import add, echo, wait


class ToolWatcher(AgentExtension):
    """Records the on_tool_call layers entered and what after_tool was given."""

    def __init__(self) -> None:
        self.layers: list[str] = []
        self.after: list[tuple[str, BaseException | None]] = []

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: Any
    ) -> ToolResult:
        self.layers.append(call.name)
        return await call_next(call)

    async def after_tool(
        self,
        context: AgentRunContext,
        call: ToolCall,
        result: ToolMessage,
        error: BaseException | None,
    ) -> None:
        self.after.append((result.content, error))


def one_call(call: ToolCall) -> ScriptedModel:
    return ScriptedModel([AssistantMessage("", tool_calls=(call,)), "Sorry."])


async def test_after_tool_receives_the_validation_error_of_invalid_arguments() -> None:
    watcher = ToolWatcher()
    agent = Agent(
        one_call(tool_call("add", {"a": "many", "b": 1})), tools=[add], extensions=[watcher]
    )

    await wait(agent.run("add"))

    ((content, error),) = watcher.after
    assert isinstance(error, ToolArgumentsError)
    assert "invalid arguments for add" in str(error) and content == f"Error: {error}"


async def test_an_unknown_tool_skips_the_onion_and_after_tool_gets_the_lookup_error() -> None:
    watcher = ToolWatcher()
    model = one_call(tool_call("no_such_tool", id="u1"))
    agent = Agent(model, tools=[echo, add], extensions=[watcher])

    await wait(agent.run("go"))

    assert watcher.layers == []
    ((content, error),) = watcher.after
    assert isinstance(error, UnknownToolError)
    assert (error.name, error.available) == ("no_such_tool", ("add", "echo"))
    read = model.requests[1].messages[-1]
    assert isinstance(read, ToolMessage) and read.is_error and read.tool_call_id == "u1"
    assert read.content == content
    assert "no_such_tool" in read.content and "add, echo" in read.content


async def test_a_registered_tool_still_runs_inside_every_layer() -> None:
    watcher = ToolWatcher()
    agent = Agent(one_call(tool_call("add", {"a": 1, "b": 2})), tools=[add], extensions=[watcher])

    await wait(agent.run("add"))

    assert watcher.layers == ["add"]
    assert watcher.after == [("3", None)]
