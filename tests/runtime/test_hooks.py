"""What hooks may change: model request, model and tool middleware, tool results, failures."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentExtension,
    AgentProtocolError,
    AgentRunConfig,
    AgentRunContext,
    AssistantMessage,
    ExtensionEvent,
    MessageAppendedEvent,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
    tool,
)

from .conftest import Recorder, add, collect


def calls_then(answer: str, *calls: ToolCall) -> ScriptedModel:
    """A model that requests the given tool calls in one turn, then answers."""
    return ScriptedModel([AssistantMessage("", tool_calls=calls), answer])


class Appended(AgentExtension):
    """Keeps every MessageAppendedEvent, as a persistence subscriber would."""

    def __init__(self) -> None:
        self.events: list[MessageAppendedEvent] = []

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        if isinstance(event, MessageAppendedEvent):
            self.events.append(event)

    def tool_messages(self) -> list[ToolMessage]:
        return [e.message for e in self.events if isinstance(e.message, ToolMessage)]


# -- input and model request -------------------------------------------------------------


async def test_on_message_replacement_is_the_input_that_gets_appended() -> None:
    class Mode(AgentExtension):
        async def on_message(self, context: AgentRunContext) -> None:
            assert context.input_message is not None
            context.input_message = UserMessage(f"[terse] {context.input_message.content}")

    model = ScriptedModel(["Ok."])
    agent = Agent(model, extensions=[Mode()])
    await agent.run("hi")

    assert [m.content for m in model.requests[0].messages if m.role == "user"] == ["[terse] hi"]


async def test_before_model_add_message_reaches_the_provider() -> None:
    class Guidance(AgentExtension):
        async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
            if "add" in {definition.name for definition in request.tools}:
                context.add_message(SystemMessage("Use add for sums."))

    model = ScriptedModel(["Ok."])
    agent = Agent(model, tools=[add], extensions=[Guidance()])
    await agent.run("1+1")

    assert [m.content for m in model.requests[0].messages] == [
        "You are a helpful assistant.",
        "1+1",
        "Use add for sums.",
    ]


async def test_later_before_model_hooks_see_the_rebuilt_request() -> None:
    seen: list[int] = []

    class Adds(AgentExtension):
        priority = 10

        async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
            context.add_message(UserMessage("extra"))

    class Counts(AgentExtension):
        priority = 20

        async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
            seen.append(len(request.messages))

    await Agent(ScriptedModel(["Ok."]), extensions=[Adds(), Counts()]).run("hi")

    assert seen == [3]


class Layer(AgentExtension):
    """Logs when its on_model_request layer starts and finishes around the inner stream."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def on_model_request(  # type: ignore[override]
        self, context: AgentRunContext, request: ModelRequest, call_next: Any
    ) -> AsyncIterator[ModelEvent]:
        self.log.append(f"{self.name}:enter")
        async for event in call_next(request):
            if event.kind == "completed":
                self.log.append(f"{self.name}:completed")
            yield event
        self.log.append(f"{self.name}:exit")


async def test_on_model_request_layers_nest_with_the_first_extension_outermost(
    log: list[str],
) -> None:
    agent = Agent(ScriptedModel(["Ok."]), extensions=[Layer("outer", log), Layer("inner", log)])

    await agent.run("hi")

    assert log == [
        "outer:enter",
        "inner:enter",
        "inner:completed",
        "outer:completed",
        "inner:exit",
        "outer:exit",
    ]


async def test_on_model_request_may_replace_the_request() -> None:
    class Redact(AgentExtension):
        async def on_model_request(  # type: ignore[override]
            self, context: AgentRunContext, request: ModelRequest, call_next: Any
        ) -> AsyncIterator[ModelEvent]:
            redacted = tuple(
                UserMessage("[redacted]") if m.role == "user" else m for m in request.messages
            )
            async for event in call_next(replace(request, messages=redacted, tools=())):
                yield event

    model = ScriptedModel(["Ok."])
    agent = Agent(model, tools=[add], extensions=[Redact()])
    await agent.run("my secret")

    (request,) = model.requests
    assert [m.content for m in request.messages] == ["You are a helpful assistant.", "[redacted]"]
    assert request.tools == ()


# -- tool middleware -------------------------------------------------------------------------


async def test_on_tool_call_layers_nest_with_the_first_extension_outermost(
    log: list[str],
) -> None:
    class ToolLayer(AgentExtension):
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_tool_call(
            self, context: AgentRunContext, call: ToolCall, call_next: Any
        ) -> ToolResult:
            log.append(f"{self.name}:enter")
            result: ToolResult = await call_next(call)
            log.append(f"{self.name}:exit:{result.content}")
            return result

    model = calls_then("Ok.", tool_call("add", {"a": 1, "b": 2}))
    agent = Agent(model, tools=[add], extensions=[ToolLayer("outer"), ToolLayer("inner")])
    await agent.run("go")

    assert log == ["outer:enter", "inner:enter", "inner:exit:3", "outer:exit:3"]


async def test_on_tool_call_may_short_circuit_the_tool() -> None:
    ran: list[str] = []

    @tool
    def delete_everything() -> str:
        ran.append("deleted")
        return "gone"

    class Deny(AgentExtension):
        async def on_tool_call(
            self, context: AgentRunContext, call: ToolCall, call_next: Any
        ) -> ToolResult:
            return ToolResult("Denied by policy.", is_error=True)

    model = calls_then("Ok.", tool_call("delete_everything", id="c1"))
    store = Appended()
    agent = Agent(model, tools=[delete_everything], extensions=[Deny(), store])
    events = await collect(agent, "clean up")

    assert ran == []
    (message,) = store.tool_messages()
    assert (message.tool_call_id, message.content, message.is_error) == (
        "c1",
        "Denied by policy.",
        True,
    )
    assert AgentEventType.TOOL_FAILED in [event.type for event in events]
    assert model.requests[1].messages[-1].content == "Denied by policy."


async def test_on_tool_call_may_adjust_the_arguments() -> None:
    class Double(AgentExtension):
        async def on_tool_call(
            self, context: AgentRunContext, call: ToolCall, call_next: Any
        ) -> ToolResult:
            doubled = {key: value * 2 for key, value in call.arguments.items()}
            return await call_next(replace(call, arguments=doubled))  # type: ignore[no-any-return]

    model = calls_then("Ok.", tool_call("add", {"a": 1, "b": 2}, id="c1"))
    store = Appended()
    agent = Agent(model, tools=[add], extensions=[Double(), store])
    await agent.run("go")

    (message,) = store.tool_messages()
    assert (message.tool_call_id, message.content) == ("c1", "6")


async def test_on_tool_call_error_becomes_a_failed_tool_result() -> None:
    class Guard(AgentExtension):
        async def on_tool_call(
            self, context: AgentRunContext, call: ToolCall, call_next: Any
        ) -> ToolResult:
            raise PermissionError("not allowed here")

    model = calls_then("Understood.", tool_call("add", {"a": 1, "b": 2}, id="c1"))
    store = Appended()
    answer = await Agent(model, tools=[add], extensions=[Guard(), store]).run("go")

    (message,) = store.tool_messages()
    assert message.is_error and "not allowed here" in message.content
    assert answer.content == "Understood."


# -- after_tool -----------------------------------------------------------------------------


async def test_after_tool_edit_reaches_context_persistence_and_next_request() -> None:
    contexts: list[AgentRunContext] = []

    class Annotate(AgentExtension):
        async def after_tool(
            self,
            context: AgentRunContext,
            call: ToolCall,
            result: ToolMessage,
            error: BaseException | None,
        ) -> None:
            result.content = f"{result.content} (checked)"
            contexts.append(context)

    model = calls_then("Ok.", tool_call("add", {"a": 1, "b": 2}, id="c1"))
    store = Appended()
    agent = Agent(model, tools=[add], extensions=[Annotate(), store])
    await agent.run("go")

    in_state = [m for m in contexts[0].state.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in in_state] == ["3 (checked)"]
    assert [m.content for m in store.tool_messages()] == ["3 (checked)"]
    assert model.requests[1].messages[-1].content == "3 (checked)"


async def test_after_tool_error_prevents_the_append_and_fails_the_run(log: list[str]) -> None:
    class Reject(AgentExtension):
        async def after_tool(
            self,
            context: AgentRunContext,
            call: ToolCall,
            result: ToolMessage,
            error: BaseException | None,
        ) -> None:
            raise PermissionError("result rejected")

    model = calls_then("Ok.", tool_call("add", {"a": 1, "b": 2}))
    store = Appended()
    agent = Agent(model, tools=[add], extensions=[Reject(), store, Recorder(log)])

    with pytest.raises(PermissionError, match="result rejected"):
        await agent.run("go")

    assert store.tool_messages() == []
    assert model.calls == 1
    assert log[-1] == "on_error"
    assert "after_turn" not in log and "after_run" not in log


async def test_after_tool_receives_the_original_tool_exception() -> None:
    errors: list[BaseException | None] = []

    @tool
    def broken() -> str:
        raise LookupError("no such row")

    class Watch(AgentExtension):
        async def after_tool(
            self,
            context: AgentRunContext,
            call: ToolCall,
            result: ToolMessage,
            error: BaseException | None,
        ) -> None:
            errors.append(error)

    model = ScriptedModel(
        [
            AssistantMessage("", tool_calls=(tool_call("broken"),)),
            AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 1}),)),
            "Ok.",
        ]
    )
    await Agent(model, tools=[broken, add], extensions=[Watch()]).run("go")

    assert isinstance(errors[0], LookupError)
    assert errors[1] is None


# -- success and failure --------------------------------------------------------------------


async def test_on_success_error_goes_through_on_error_and_suppresses_run_completed(
    log: list[str],
) -> None:
    class Save(AgentExtension):
        async def on_success(self, context: AgentRunContext, result: AssistantMessage) -> None:
            raise OSError("disk full")

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Save(), Recorder(log)])
    seen: list[str] = []

    with pytest.raises(OSError, match="disk full"):
        async for event in agent.stream("hi"):
            seen.append(event.type.name)

    assert "RUN_COMPLETED" not in seen
    assert log[-2:] == ["after_run", "on_error"]


async def test_on_error_receives_the_failure_and_the_error_propagates(log: list[str]) -> None:
    errors: list[BaseException] = []

    class Watch(AgentExtension):
        async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
            errors.append(error)
            assert context.state.phase.name == "FAILED"

    failure = ConnectionError("provider unreachable")
    agent = Agent(ScriptedModel([failure]), extensions=[Watch(), Recorder(log)])

    with pytest.raises(ConnectionError):
        await agent.run("hi")

    assert errors == [failure]
    assert "after_model" not in log and "after_run" not in log and "on_success" not in log
    assert log[-1] == "on_error"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (tool_call("explode", {"reason": "kaboom"}, id="c1"), "kaboom"),
        (tool_call("no_such_tool", id="c1"), "unknown tool 'no_such_tool'"),
        (tool_call("add", {"a": "not a number", "b": 1}, id="c1"), "invalid arguments for add"),
        (tool_call("add", {"a": 1, "b": 2, "c": 3}, id="c1"), "invalid arguments for add"),
    ],
    ids=["raising", "unknown", "invalid-type", "unexpected-argument"],
)
async def test_failed_tool_becomes_an_error_tool_message_the_model_reads(
    call: ToolCall, expected: str
) -> None:
    model = calls_then("Sorry.", call)
    store = Appended()
    agent = Agent(model, tools=[add, explode], extensions=[store])

    events = await collect(agent, "go")

    (message,) = store.tool_messages()
    assert message.is_error and message.tool_call_id == "c1"
    assert expected in message.content
    failed = [event for event in events if event.type is AgentEventType.TOOL_FAILED]
    assert len(failed) == 1 and failed[0].message is message
    assert model.requests[1].messages[-1] is message
    assert events[-1].type is AgentEventType.RUN_COMPLETED


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    threads: list[int] = []

    @tool
    def where() -> str:
        threads.append(threading.get_ident())
        return "here"

    agent = Agent(calls_then("Ok.", tool_call("where")), tools=[where], extensions=[])
    await agent.run("go")

    assert len(threads) == 1 and threads[0] != threading.get_ident()


async def test_async_tool_runs_on_the_event_loop_thread() -> None:
    threads: list[int] = []

    @tool
    async def where() -> str:
        threads.append(threading.get_ident())
        return "here"

    agent = Agent(calls_then("Ok.", tool_call("where")), tools=[where], extensions=[])
    await agent.run("go")

    assert threads == [threading.get_ident()]


async def test_exceeding_max_iterations_fails_with_a_clear_error(log: list[str]) -> None:
    looping = AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 1}),))
    model = ScriptedModel([looping], repeat_last=True)
    agent = Agent(model, tools=[add], extensions=[Recorder(log)], max_iterations=3)

    with pytest.raises(AgentProtocolError, match="max_iterations=3"):
        await agent.run("loop forever")

    assert model.calls == 3
    assert log[-1] == "on_error"


class RawModel:
    """A model that yields exactly the given events, for protocol violations."""

    def __init__(self, events: list[ModelEvent]) -> None:
        self.events = events

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        for event in self.events:
            yield event


async def test_model_stream_without_completed_event_is_a_protocol_error() -> None:
    agent = Agent(RawModel([ModelEvent.text("half an answer")]), extensions=[])

    with pytest.raises(AgentProtocolError, match="without a completed"):
        await agent.run("hi")


async def test_model_stream_with_events_after_completed_is_a_protocol_error() -> None:
    done = ModelEvent.completed(ModelResponse(AssistantMessage("Ok.")))
    agent = Agent(RawModel([done, ModelEvent.text("more")]), extensions=[])

    with pytest.raises(AgentProtocolError, match="continued after"):
        await agent.run("hi")


async def test_model_usage_is_reported_per_call_and_summed_on_run_completed() -> None:
    from agents.runtime import ModelUsage

    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 1}),)), "Ok."],
        usage=ModelUsage(10, 2),
    )
    events = await collect(Agent(model, tools=[add], extensions=[]), "go", AgentRunConfig())

    per_call = [e.usage for e in events if e.type is AgentEventType.MODEL_COMPLETED]
    assert per_call == [ModelUsage(10, 2), ModelUsage(10, 2)]
    assert events[-1].usage == ModelUsage(20, 4)


class IteratorModel:
    """A model whose stream is a plain AsyncIterator (no aclose), as the protocol allows."""

    class _Events:
        def __init__(self, events: list[ModelEvent]) -> None:
            self.pending = list(events)

        def __aiter__(self) -> IteratorModel._Events:
            return self

        async def __anext__(self) -> ModelEvent:
            if not self.pending:
                raise StopAsyncIteration
            return self.pending.pop(0)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        done = ModelResponse(AssistantMessage("Plain."))
        return self._Events([ModelEvent.text("Plain."), ModelEvent.completed(done)])


async def test_default_model_layer_accepts_a_plain_async_iterator() -> None:
    class Observer(AgentExtension):
        def on_model_request(
            self, context: AgentRunContext, request: ModelRequest, call_next: Any
        ) -> AsyncIterator[ModelEvent]:
            return super().on_model_request(context, request, call_next)

    agent = Agent(IteratorModel(), extensions=[Observer()])

    answer = await agent.run("hi")

    assert answer.content == "Plain."
