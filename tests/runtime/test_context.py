"""AgentRunContext as its seed page describes it: identity, emit, tool registries, messages."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from agents.providers.scripted import ScriptedModel
from agents.runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExtension,
    AgentProtocolError,
    AgentRunConfig,
    AgentRunContext,
    AgentState,
    ExtensionEvent,
    MessageAppendedEvent,
    ModelRequest,
    ModelUsage,
    ServerToolDefinition,
    SystemMessage,
    UserMessage,
    tool,
)

from .conftest import Recorder, add, collect


@dataclass(frozen=True)
class Ping(ExtensionEvent):
    label: str


class Listener(AgentExtension):
    """Records the events it receives under its name into a shared list."""

    def __init__(self, name: str, received: list[tuple[str, object]]) -> None:
        self.name = name
        self.received = received

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        self.received.append((self.name, event))


class Failing(Listener):
    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        await super().on_event(context, event)
        raise RuntimeError(f"{self.name} cannot handle it")


def bare_context(*extensions: AgentExtension) -> AgentRunContext:
    """A context outside any Agent, for the methods that need no runtime around them."""
    return AgentRunContext(
        AgentRunConfig(session_id="s", request_id="r"), AgentState(), {}, extensions
    )


def appended(received: list[tuple[str, object]]) -> list[MessageAppendedEvent]:
    return [event for _, event in received if isinstance(event, MessageAppendedEvent)]


# -- identity ----------------------------------------------------------------------------


async def test_session_id_is_the_configured_session() -> None:
    seen: list[str] = []

    class Watch(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            seen.append(context.session_id)

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Watch()])
    await agent.run("hi", config=AgentRunConfig(session_id="chat-42"))

    assert seen == ["chat-42"]


async def test_session_id_is_filled_in_when_the_caller_left_it_out() -> None:
    seen: list[str] = []

    class Watch(AgentExtension):
        async def on_tool(self, context: AgentRunContext) -> None:
            seen.append(context.session_id)

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Watch()])
    events = await collect(agent, "hi")

    assert len(seen) == 1 and uuid.UUID(seen[0]).version == 7
    assert events[0].session_id == seen[0]


# -- emit ------------------------------------------------------------------------------------


async def test_emitted_custom_event_reaches_the_caller_stamped() -> None:
    class Announcer(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            await context.emit(
                AgentEvent(AgentEventType.CUSTOM, name="demo.announce", data={"n": 1})
            )

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Announcer()])
    events = await collect(agent, "hi", AgentRunConfig(session_id="s1", request_id="r1"))

    custom = [event for event in events if event.type is AgentEventType.CUSTOM]
    assert len(custom) == 1
    event = custom[0]
    assert (event.name, dict(event.data)) == ("demo.announce", {"n": 1})
    assert (event.session_id, event.request_id) == ("s1", "r1")
    assert event.seq == events.index(event) + 1
    assert event.phase.name == "LOADING_CONTEXT"


async def test_compaction_events_may_be_emitted() -> None:
    class Compactor(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            await context.emit(AgentEvent(AgentEventType.COMPACTION_STARTED))
            await context.emit(AgentEvent(AgentEventType.COMPACTION_COMPLETED))

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Compactor()])
    events = await collect(agent, "hi")

    assert [e.type.name for e in events if e.type.name.startswith("COMPACTION")] == [
        "COMPACTION_STARTED",
        "COMPACTION_COMPLETED",
    ]


RUNTIME_OWNED = [
    event_type
    for event_type in AgentEventType
    if event_type.name not in {"CUSTOM", "COMPACTION_STARTED", "COMPACTION_COMPLETED"}
]


@pytest.mark.parametrize("event_type", RUNTIME_OWNED, ids=lambda t: t.name)
async def test_emitting_a_runtime_owned_event_type_is_a_protocol_error(
    event_type: AgentEventType,
) -> None:
    outcomes: list[str] = []

    class Impostor(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            try:
                await context.emit(AgentEvent(event_type, data={"impostor": True}))
            except AgentProtocolError:
                outcomes.append("refused")

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Impostor()])
    events = await collect(agent, "hi")

    assert outcomes == ["refused"]
    assert not [event for event in events if event.data.get("impostor")]


# -- tool registries -------------------------------------------------------------------------


async def test_register_tool_rejects_a_second_tool_with_the_same_name() -> None:
    outcomes: list[str] = []

    @tool(name="add")
    def other_add(a: int) -> int:
        return a

    class Registrar(AgentExtension):
        async def on_tool(self, context: AgentRunContext) -> None:
            try:
                context.register_tool(other_add)
            except ValueError as error:
                outcomes.append(str(error))

    model = ScriptedModel(["Ok."])
    agent = Agent(model, tools=[add], extensions=[Registrar()])
    await agent.run("hi")

    assert len(outcomes) == 1 and "add" in outcomes[0]
    (definition,) = model.requests[0].tools
    assert set(definition.parameters["properties"]) == {"a", "b"}


async def test_register_tool_copies_the_schema() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    registered: list[AgentRunContext] = []

    class Registrar(AgentExtension):
        async def on_tool(self, context: AgentRunContext) -> None:
            context.register_tool(lookup)
            lookup.parameters["properties"]["injected"] = {"type": "string"}  # type: ignore[index]
            registered.append(context)

    model = ScriptedModel(["Ok."])
    agent = Agent(model, extensions=[Registrar()])
    await agent.run("hi")

    assert "injected" in lookup.parameters["properties"]
    assert "injected" not in registered[0].tools["lookup"].parameters["properties"]
    (definition,) = model.requests[0].tools
    assert set(definition.parameters["properties"]) == {"key"}


async def test_register_server_tool_rejects_a_duplicate_type_and_copies_configuration() -> None:
    configuration = {"search_context_size": "medium", "domains": ["example.com"]}
    outcomes: list[str] = []
    contexts: list[AgentRunContext] = []

    class Search(AgentExtension):
        async def on_tool(self, context: AgentRunContext) -> None:
            context.register_server_tool(ServerToolDefinition("web_search", configuration))
            configuration["search_context_size"] = "high"
            configuration["domains"].append("evil.example")  # type: ignore[attr-defined]
            try:
                context.register_server_tool(ServerToolDefinition("web_search"))
            except ValueError as error:
                outcomes.append(str(error))
            contexts.append(context)

    model = ScriptedModel(["Ok."])
    agent = Agent(model, extensions=[Search()])
    await agent.run("hi")

    assert len(outcomes) == 1 and "web_search" in outcomes[0]
    (server_tool,) = model.requests[0].server_tools
    assert server_tool.type == "web_search"
    assert dict(server_tool.configuration) == {
        "search_context_size": "medium",
        "domains": ["example.com"],
    }
    assert contexts[0].tools == {}
    assert model.requests[0].tools == ()


async def test_tool_registries_are_request_scoped() -> None:
    @tool
    def secret() -> str:
        return "42"

    class PerSession(AgentExtension):
        async def on_tool(self, context: AgentRunContext) -> None:
            if context.session_id == "vip":
                context.register_tool(secret)
            else:
                del context.tools["add"]

    model = ScriptedModel(["One.", "Two.", "Three."])
    agent = Agent(model, tools=[add], extensions=[PerSession()])

    await agent.run("hi", config=AgentRunConfig(session_id="vip"))
    await agent.run("hi", config=AgentRunConfig(session_id="plain"))
    await agent.run("hi", config=AgentRunConfig(session_id="vip"))

    offered = [sorted(d.name for d in request.tools) for request in model.requests]
    assert offered == [["add", "secret"], [], ["add", "secret"]]
    assert [t.name for t in agent.tools] == ["add"]


# -- publish ---------------------------------------------------------------------------------


async def test_publish_broadcasts_to_every_extension_in_hook_order() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(
        Listener("a", received), Listener("b", received), Listener("c", received)
    )
    ping = Ping("hello")

    await context.publish(ping)

    assert received == [("a", ping), ("b", ping), ("c", ping)]


async def test_publish_to_a_target_delivers_to_exactly_that_extension() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("a", received), Listener("b", received))

    await context.publish(Ping("only b"), target="b")

    assert [name for name, _ in received] == ["b"]


async def test_publish_to_unknown_target_delivers_nothing() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("a", received), Listener("b", received))

    with pytest.raises(ValueError, match="unknown"):
        await context.publish(Ping("lost"), target="nobody")

    assert received == []


async def test_publish_to_ambiguous_target_delivers_nothing() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("twin", received), Listener("twin", received))

    with pytest.raises(ValueError, match="ambiguous"):
        await context.publish(Ping("which one"), target="twin")

    assert received == []


async def test_publish_handler_error_stops_delivery_and_keeps_finished_work() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("a", received), Failing("b", received), Listener("c", received))

    with pytest.raises(RuntimeError, match="b cannot handle it"):
        await context.publish(Ping("x"))

    assert [name for name, _ in received] == ["a", "b"]


# -- messages --------------------------------------------------------------------------------


async def test_append_message_is_visible_before_subscribers_run() -> None:
    visible: list[bool] = []

    class Check(AgentExtension):
        async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
            assert isinstance(event, MessageAppendedEvent)
            visible.append(context.state.messages[event.index] is event.message)

    context = bare_context(Check())
    message = UserMessage("hi")

    await context.append_message(message, None, ModelUsage(3, 4))

    assert visible == [True]
    assert context.state.messages == [message]


async def test_append_message_subscriber_failure_does_not_roll_back() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Failing("store", received))
    message = UserMessage("kept")

    with pytest.raises(RuntimeError):
        await context.append_message(message, None)

    assert context.state.messages == [message]
    assert appended(received)[0].message is message


async def test_add_message_in_setup_is_published_after_setup_before_the_input(
    log: list[str],
) -> None:
    class Instructions(AgentExtension):
        async def on_state(self, context: AgentRunContext) -> None:
            context.add_message(SystemMessage("Be brief."))

    model = ScriptedModel(["Ok."])
    agent = Agent(model, system_prompt="", extensions=[Instructions(), Recorder(log)])
    await agent.run("hi")

    assert log[:6] == [
        "on_tool",
        "on_state",
        "on_message",
        "on_event:system",
        "on_event:user",
        "before_run",
    ]
    assert [m.content for m in model.requests[0].messages] == ["Be brief.", "hi"]


async def test_add_message_before_a_turn_is_published_before_the_model_request(
    log: list[str],
) -> None:
    class Reminder(AgentExtension):
        async def before_turn(self, context: AgentRunContext) -> None:
            context.add_message(UserMessage("(reminder)"))

    agent = Agent(ScriptedModel(["Ok."]), extensions=[Reminder(), Recorder(log)])
    await agent.run("hi")

    start = log.index("before_turn")
    assert log[start : start + 4] == [
        "before_turn",
        "on_event:user",
        "before_model",
        "on_model_request",
    ]


async def test_replace_messages_queues_events_only_for_new_messages() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("store", received))
    kept, new = UserMessage("kept"), UserMessage("new")
    context.replace_messages([kept], emit_new=False)

    context.replace_messages([kept, new])
    await context.flush_message_events()

    assert [event.message for event in appended(received)] == [new]
    assert context.state.messages == [kept, new]


async def test_replace_messages_without_emit_new_queues_nothing() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("store", received))
    restored = [UserMessage("old question"), UserMessage("old follow-up")]

    context.replace_messages(restored, emit_new=False)
    await context.flush_message_events()

    assert received == []
    assert context.state.messages == restored


async def test_add_message_event_queues_an_event_for_a_message_already_in_state() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("store", received))
    restored = UserMessage("restored")
    context.replace_messages([restored], emit_new=False)

    context.add_message_event(restored, ModelUsage(1, 2))
    await context.flush_message_events()

    (event,) = appended(received)
    assert (event.message, event.usage, event.index) == (restored, ModelUsage(1, 2), 0)
    with pytest.raises(ValueError):
        context.add_message_event(UserMessage("never added"))


async def test_flush_publishes_each_queued_message_once_in_state_order() -> None:
    received: list[tuple[str, object]] = []
    context = bare_context(Listener("store", received))
    last, first = UserMessage("last"), UserMessage("first")
    context.add_message(last)
    context.add_message(first, index=0)
    context.add_message_event(last)

    await context.flush_message_events()
    await context.flush_message_events()

    events = appended(received)
    assert [(event.message, event.index) for event in events] == [(first, 0), (last, 1)]


async def test_before_model_sees_a_request_built_from_the_context(log: list[str]) -> None:
    seen: list[ModelRequest] = []

    class Peek(AgentExtension):
        async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
            seen.append(request)

    agent = Agent(ScriptedModel(["Ok."]), tools=[add], extensions=[Peek()])
    await agent.run("hi", config=AgentRunConfig(session_id="s", request_id="r"))

    (request,) = seen
    assert (request.session_id, request.request_id, request.iteration) == ("s", "r", 1)
    assert [m.role for m in request.messages] == ["system", "user"]
    assert [d.name for d in request.tools] == ["add"]
