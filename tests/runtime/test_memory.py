"""InMemoryMessageAccumulator as its seed page describes it, and the Agent's default extensions."""

from __future__ import annotations

import pytest

from agents.extensions.memory import InMemoryMessageAccumulator
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentRunConfig,
    AgentRunContext,
    AgentState,
    AssistantMessage,
    CompactionEvent,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from .conftest import add


def dialogue(messages: tuple[object, ...] | list[object]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]  # type: ignore[attr-defined]


async def remember_two_exchanges(memory: InMemoryMessageAccumulator, session_id: str) -> None:
    agent = Agent(ScriptedModel(["A1", "A2"]), extensions=[memory])
    config = AgentRunConfig(session_id=session_id)
    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)


def memory_context(memory: InMemoryMessageAccumulator, session_id: str) -> AgentRunContext:
    return AgentRunContext(
        AgentRunConfig(session_id=session_id, request_id="r"), AgentState(), {}, [memory]
    )


async def test_default_extensions_are_one_accumulator_that_remembers_the_session(
    config: AgentRunConfig,
) -> None:
    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model)

    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)

    assert [type(extension) for extension in agent.extensions] == [InMemoryMessageAccumulator]
    assert dialogue(model.requests[1].messages) == [
        ("system", "You are a helpful assistant."),
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
    ]


async def test_each_default_agent_gets_its_own_accumulator() -> None:
    first, second = Agent(ScriptedModel()), Agent(ScriptedModel())

    assert first.extensions[0] is not second.extensions[0]


async def test_empty_extension_list_means_no_memory(config: AgentRunConfig) -> None:
    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model, extensions=[])

    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)

    assert agent.extensions == ()
    assert dialogue(model.requests[1].messages) == [
        ("system", "You are a helpful assistant."),
        ("user", "Q2"),
    ]


async def test_messages_outside_the_dialogue_stay_in_their_request(config: AgentRunConfig) -> None:
    class Scratch(AgentExtension):
        requests = 0

        async def before_run(self, context: AgentRunContext) -> None:
            self.requests += 1
            note = UserMessage(f"scratch {self.requests}", include_in_messages=False)
            context.add_message(note)

    memory = InMemoryMessageAccumulator()
    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model, extensions=[memory, Scratch()])

    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)

    assert [m.content for m in model.requests[0].messages if "scratch" in m.content] == [
        "scratch 1"
    ]
    assert [m.content for m in model.requests[1].messages if "scratch" in m.content] == [
        "scratch 2"
    ]
    assert dialogue(memory.messages("session-1")) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
    ]


async def test_system_instructions_are_rebuilt_for_every_request(config: AgentRunConfig) -> None:
    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model, system_prompt="Old rules.")

    await agent.run("Q1", config=config)
    agent.system_prompt = "New rules."
    await agent.run("Q2", config=config)

    system = [m.content for m in model.requests[1].messages if m.role == "system"]
    assert system == ["New rules."]
    assert model.requests[1].messages[0].content == "New rules."
    assert all(m.role != "system" for m in agent.extensions[0].messages("session-1"))  # type: ignore[attr-defined]


async def test_compaction_event_with_kept_range_replaces_remembered_dialogue() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")

    await memory_context(memory, "s").publish(
        CompactionEvent(compressed_from=1, compressed_to=2, kept_from=3, kept_to=4, summary="Hi.")
    )

    remembered = memory.messages("s")
    assert dialogue(remembered) == [
        ("user", "Summary of the earlier conversation:\nHi."),
        ("user", "Q2"),
        ("assistant", "A2"),
    ]


async def test_compaction_event_with_messages_replaces_remembered_dialogue() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")
    replacement = (UserMessage("Earlier: Q1 and Q2 were asked."), AssistantMessage("Noted."))

    await memory_context(memory, "s").publish(
        CompactionEvent(
            compressed_from=1,
            compressed_to=4,
            kept_from=0,
            kept_to=0,
            summary="ignored",
            messages=replacement,
        )
    )

    assert dialogue(memory.messages("s")) == dialogue(list(replacement))


async def test_compacted_dialogue_is_what_the_next_request_restores() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")
    await memory_context(memory, "s").publish(
        CompactionEvent(compressed_from=1, compressed_to=2, kept_from=3, kept_to=4, summary="S")
    )
    model = ScriptedModel(["A3"])

    await Agent(model, extensions=[memory]).run("Q3", config=AgentRunConfig(session_id="s"))

    assert [m.content for m in model.requests[0].messages] == [
        "You are a helpful assistant.",
        "Summary of the earlier conversation:\nS",
        "Q2",
        "A2",
        "Q3",
    ]


async def test_messages_returns_a_copy() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")

    returned = memory.messages("s")
    returned[0].content = "tampered"
    returned[0].attributes["tampered"] = True

    again = memory.messages("s")
    assert isinstance(returned, tuple)
    assert again[0].content == "Q1"
    assert again[0].attributes == {}


async def test_clear_forgets_one_session_only() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "forget-me")
    await remember_two_exchanges(memory, "keep-me")

    memory.clear("forget-me")

    assert memory.messages("forget-me") == ()
    assert len(memory.messages("keep-me")) == 4
    memory.clear("never-seen")  # forgetting an unknown session is harmless


async def test_restored_messages_are_independent_of_memory() -> None:
    class Vandal(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            for message in context.state.messages:
                message.content = "vandalised"
                message.attributes["vandalised"] = True

    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")
    model = ScriptedModel(["A3"])

    await Agent(model, extensions=[memory, Vandal()]).run(
        "Q3", config=AgentRunConfig(session_id="s")
    )

    remembered = memory.messages("s")
    assert [m.content for m in remembered[:4]] == ["Q1", "A1", "Q2", "A2"]
    assert all(m.attributes == {} for m in remembered[:4])


async def test_restore_closes_a_tool_call_left_without_result(config: AgentRunConfig) -> None:
    class RejectOnce(AgentExtension):
        rejected = False

        async def after_tool(
            self,
            context: AgentRunContext,
            call: ToolCall,
            result: ToolMessage,
            error: BaseException | None,
        ) -> None:
            if not self.rejected:
                self.rejected = True
                raise RuntimeError("storage down")

    memory = InMemoryMessageAccumulator()
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 1}, id="c1"),)), "A2"]
    )
    agent = Agent(model, tools=[add], extensions=[memory, RejectOnce()])
    with pytest.raises(RuntimeError):
        await agent.run("Q1", config=config)

    await agent.run("Q2", config=config)

    history = model.requests[1].messages
    assert [m.role for m in history] == ["system", "user", "assistant", "tool", "user"]
    closing = history[3]
    assert isinstance(closing, ToolMessage)
    assert (closing.tool_call_id, closing.is_error, closing.persist) == ("c1", True, False)


async def test_restored_tool_call_arguments_are_independent_of_memory(
    config: AgentRunConfig,
) -> None:
    class Rewrite(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            for message in context.state.messages:
                if isinstance(message, AssistantMessage):
                    for call in message.tool_calls:
                        call.arguments["a"] = 999

    memory = InMemoryMessageAccumulator()
    model = ScriptedModel(
        [AssistantMessage("", tool_calls=(tool_call("add", {"a": 1, "b": 1}),)), "A1", "A2"]
    )
    await Agent(model, tools=[add], extensions=[memory]).run("Q1", config=config)

    await Agent(model, tools=[add], extensions=[memory, Rewrite()]).run("Q2", config=config)
    memory.messages("session-1")[1].tool_calls[0].arguments["b"] = 999  # type: ignore[union-attr]

    remembered = memory.messages("session-1")[1]
    assert isinstance(remembered, AssistantMessage)
    assert remembered.tool_calls[0].arguments == {"a": 1, "b": 1}


class Recapper(AgentExtension):
    """Compacts like the seed's example: rewrites the context, then announces the ranges."""

    async def on_compact(self, context: AgentRunContext) -> None:
        dialogue = [m for m in context.state.messages if m.include_in_messages]
        recap = UserMessage("Recap in my words: Q1 got A1.")
        instructions = [m for m in context.state.messages if not m.include_in_messages]
        context.replace_messages([*instructions, recap, *dialogue[2:]], emit_new=False)
        await context.publish(
            CompactionEvent(
                compressed_from=1, compressed_to=2, kept_from=3, kept_to=4, summary="Q1: A1."
            )
        )


async def test_memory_keeps_the_context_the_compaction_hook_left() -> None:
    memory = InMemoryMessageAccumulator()
    await remember_two_exchanges(memory, "s")
    agent = Agent(ScriptedModel(["A3"]), extensions=[memory, Recapper()])

    await agent.compact(config=AgentRunConfig(session_id="s"))
    await agent.run("Q3", config=AgentRunConfig(session_id="s"))

    assert dialogue(agent.model.requests[0].messages) == [  # type: ignore[attr-defined]
        ("system", "You are a helpful assistant."),
        ("user", "Recap in my words: Q1 got A1."),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
    ]


async def test_a_system_message_marked_as_dialogue_is_remembered_in_its_place() -> None:
    memory = InMemoryMessageAccumulator()
    config = AgentRunConfig(session_id="s")

    class Moder(AgentExtension):
        async def before_run(self, context: AgentRunContext) -> None:
            if context.input_message and context.input_message.content == "Q1":
                context.add_message(SystemMessage("Mode: terse.", include_in_messages=True))

    model = ScriptedModel(["A1", "A2"])
    agent = Agent(model, extensions=[memory, Moder()])
    await agent.run("Q1", config=config)
    await agent.run("Q2", config=config)

    assert dialogue(model.requests[1].messages) == [
        ("system", "You are a helpful assistant."),
        ("user", "Q1"),
        ("system", "Mode: terse."),
        ("assistant", "A1"),
        ("user", "Q2"),
    ]
    assert ("system", "You are a helpful assistant.") not in dialogue(memory.messages("s"))
