"""SummaryCompactionExtension: older dialogue becomes one summary; failure changes nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.extensions.memory import InMemoryMessageAccumulator
from agents.extensions.summary_compaction import SummaryCompactionExtension
from agents.providers.scripted import ScriptedModel
from agents.runtime import (
    Agent,
    AgentEventType,
    AgentPhase,
    AgentRunConfig,
    AssistantMessage,
    ModelUsage,
    ToolCall,
    tool,
)


def config() -> AgentRunConfig:
    return AgentRunConfig(session_id="session-c")


def contents(messages: object) -> list[str]:
    return [getattr(m, "content", "") for m in messages]  # type: ignore[attr-defined]


async def test_compact_summarises_older_turns_and_the_next_request_sees_summary_and_tail() -> None:
    memory = InMemoryMessageAccumulator()
    summariser = ScriptedModel(["Q1 was answered with A1."])
    extension = SummaryCompactionExtension(model=summariser, auto="never", keep_last_messages=2)
    model = ScriptedModel(["A1", "A2", "A3"])
    agent = Agent(model, extensions=[memory, extension])
    await agent.run("Q1", config=config())
    await agent.run("Q2", config=config())

    events = await agent.compact(config=config())

    assert [e.type for e in events] == [
        AgentEventType.COMPACTION_STARTED,
        AgentEventType.COMPACTION_COMPLETED,
    ]
    assert events[1].data["compacted"] is True
    assert (events[1].data["summarized"], events[1].data["kept"]) == (2, 2)
    transcript = summariser.requests[0].messages[-1].content
    assert "Q1" in transcript and "A1" in transcript and "Q2" not in transcript
    remembered = memory.messages("session-c")
    assert contents(remembered) == [
        "Summary of the earlier conversation:\nQ1 was answered with A1.",
        "Q2",
        "A2",
    ]
    assert remembered[0].attributes["compaction_summary"] is True

    await agent.run("Q3", config=config())

    dialogue = [m for m in model.requests[-1].messages if m.role != "system"]
    assert contents(dialogue) == [
        "Summary of the earlier conversation:\nQ1 was answered with A1.",
        "Q2",
        "A2",
        "Q3",
    ]


@pytest.mark.parametrize("failure", [RuntimeError("provider down"), "   "])
async def test_a_failed_or_empty_summary_leaves_the_context_unchanged(failure: object) -> None:
    memory = InMemoryMessageAccumulator()
    extension = SummaryCompactionExtension(
        model=ScriptedModel([failure]), auto="never", keep_last_messages=2
    )
    agent = Agent(ScriptedModel(["A1", "A2"]), extensions=[memory, extension])
    await agent.run("Q1", config=config())
    await agent.run("Q2", config=config())

    events = await agent.compact(config=config())

    assert events[-1].type is AgentEventType.COMPACTION_COMPLETED
    assert events[-1].data["compacted"] is False and events[-1].data["error"]
    assert contents(memory.messages("session-c")) == ["Q1", "A1", "Q2", "A2"]


async def test_auto_compaction_before_a_model_call_keeps_a_tool_call_with_its_result() -> None:
    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    memory = InMemoryMessageAccumulator()
    summariser = ScriptedModel(["Earlier: greetings."])
    extension = SummaryCompactionExtension(
        model=summariser, auto="messages", threshold_messages=4, keep_last_messages=2
    )
    call = AssistantMessage("", tool_calls=(ToolCall("call-1", "lookup", {"city": "Oslo"}),))
    model = ScriptedModel(["Hello.", call, "It is sunny."])
    agent = Agent(model, tools=[lookup], extensions=[memory, extension])
    await agent.run("Hi", config=config())

    events = [e async for e in agent.stream("Weather in Oslo?", config=config())]

    # Threshold crossed only before the second model call of this request (4 messages):
    # the kept tail starts at the user message, so the call and its result stay together.
    kinds = [e.type for e in events]
    started = kinds.index(AgentEventType.COMPACTION_STARTED)
    assert kinds[started + 1] is AgentEventType.COMPACTION_COMPLETED
    assert events[started].phase is AgentPhase.COMPACTING
    assert summariser.calls == 1
    assert "Hello." in summariser.requests[0].messages[-1].content
    last = [m for m in model.requests[-1].messages if m.role != "system"]
    assert [m.role for m in last] == ["user", "user", "assistant", "tool"]
    assert last[0].content.endswith("Earlier: greetings.")
    assert last[1].content == "Weather in Oslo?"


def test_settings_refuse_unknown_keys_and_bad_modes() -> None:
    with pytest.raises(ValidationError):
        SummaryCompactionExtension(keep_last=3)
    with pytest.raises(ValidationError):
        SummaryCompactionExtension(auto="sometimes")


async def test_the_completed_event_names_the_summary_the_first_kept_message_and_the_usage() -> None:
    memory = InMemoryMessageAccumulator()
    usage = ModelUsage(input_tokens=120, output_tokens=8)
    extension = SummaryCompactionExtension(
        model=ScriptedModel(["The gist."], usage=usage), auto="never", keep_last_messages=2
    )
    agent = Agent(ScriptedModel(["A1", "A2"]), extensions=[memory, extension])
    await agent.run("Q1", config=config())
    await agent.run("Q2", config=config())

    events = await agent.compact(config=config())

    completed = events[-1]
    summary, kept_first = memory.messages("session-c")[:2]
    assert completed.data["summary_id"] == summary.id
    assert completed.data["kept_first_id"] == kept_first.id and kept_first.content == "Q2"
    assert completed.usage == usage
