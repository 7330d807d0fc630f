"""Sessions: one active request per session, many sessions at once on one Agent."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

import pytest

from agents.extensions.memory import InMemoryMessageAccumulator
from agents.providers.scripted import ScriptedModel
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentProtocolError,
    AgentRunConfig,
    AgentRunContext,
    ModelRequest,
    UserMessage,
)

from .conftest import collect, wait


class HoldSession(AgentExtension):
    """Holds one session's request in before_run until released; other sessions pass."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def before_run(self, context: AgentRunContext) -> None:
        if context.session_id == self.session_id:
            self.holding.set()
            await self.release.wait()


async def test_second_concurrent_request_on_one_session_is_refused() -> None:
    hold = HoldSession("busy")
    agent = Agent(ScriptedModel(["First."]), extensions=[hold])
    first = asyncio.create_task(agent.run("one", config=AgentRunConfig(session_id="busy")))
    await wait(hold.holding.wait())

    with pytest.raises(AgentProtocolError, match="busy"):
        await agent.run("two", config=AgentRunConfig(session_id="busy"))
    with pytest.raises(AgentProtocolError):
        await collect(agent, "three", AgentRunConfig(session_id="busy"))
    still_active, still_pending = agent.is_active("busy"), hold.pending
    hold.release.set()
    answer = await wait(first)

    assert (still_active, still_pending) == (True, True)
    assert answer.content == "First."
    assert not agent.is_active("busy") and not hold.pending


async def test_other_sessions_run_while_one_session_is_busy() -> None:
    hold = HoldSession("busy")
    agent = Agent(ScriptedModel(["Other.", "Busy."]), extensions=[hold])
    busy = asyncio.create_task(agent.run("one", config=AgentRunConfig(session_id="busy")))
    await wait(hold.holding.wait())

    other = await wait(agent.run("hi", config=AgentRunConfig(session_id="other")))
    hold.release.set()

    assert other.content == "Other."
    assert (await wait(busy)).content == "Busy."


class RoundBarrier(AgentExtension):
    """Lets no model call of round N start before every session has reached round N.

    The round is the number of user messages in the request, so all sessions are
    provably inside a request at the same time.
    """

    def __init__(self, sessions: int, on_full: Callable[[int], None]) -> None:
        self.sessions = sessions
        self.on_full = on_full  # called with the round number when everyone has arrived
        self.arrived: dict[int, int] = defaultdict(int)
        self.opened: dict[int, asyncio.Event] = defaultdict(asyncio.Event)

    async def before_model(self, context: AgentRunContext, request: ModelRequest) -> None:
        round_number = sum(isinstance(m, UserMessage) for m in request.messages)
        self.arrived[round_number] += 1
        if self.arrived[round_number] == self.sessions:
            self.on_full(round_number)
            self.opened[round_number].set()
        await self.opened[round_number].wait()


def echo_own_input(request: ModelRequest) -> str:
    """Answer with the request's latest user text, so each session's reply is its own."""
    last_user = [m for m in request.messages if isinstance(m, UserMessage)][-1]
    return f"echo: {last_user.content}"


async def test_fifty_concurrent_sessions_keep_their_histories_apart() -> None:
    sessions = 50
    active_at_barrier: list[tuple[int, int]] = []

    def count_active(round_number: int) -> None:
        active = sum(agent.is_active(f"s{i}") for i in range(sessions))
        active_at_barrier.append((round_number, active))

    memory = InMemoryMessageAccumulator()
    model = ScriptedModel([echo_own_input], repeat_last=True)
    agent = Agent(model, extensions=[memory, RoundBarrier(sessions, count_active)])

    async def converse(index: int) -> list[str]:
        config = AgentRunConfig(session_id=f"s{index}")
        answers = []
        for turn in ("first", "second"):
            answer = await agent.run(f"{turn} from {index}", config=config)
            answers.append(answer.content)
        return answers

    results = await wait(asyncio.gather(*(converse(i) for i in range(sessions))), 30)

    assert active_at_barrier == [(1, sessions), (2, sessions)]
    assert model.calls == 2 * sessions
    for index, answers in enumerate(results):
        assert answers == [f"echo: first from {index}", f"echo: second from {index}"]
        assert [(m.role, m.content) for m in memory.messages(f"s{index}")] == [
            ("user", f"first from {index}"),
            ("assistant", f"echo: first from {index}"),
            ("user", f"second from {index}"),
            ("assistant", f"echo: second from {index}"),
        ]
    for request in model.requests:
        index = request.session_id.removeprefix("s")
        dialogue = [m.content for m in request.messages if m.role != "system"]
        assert all(content.endswith(f"from {index}") for content in dialogue), dialogue
    assert not agent.pending
