"""AgentRunConfig: frozen, blank ids become None, the runtime fills missing ids with UUIDv7."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from agents.providers.scripted import ScriptedModel
from agents.runtime import Agent, AgentExtension, AgentRunConfig, AgentRunContext

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
