"""ExternalEventExtension: a run waits for outside input; accept wakes it from any thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from agents.providers.scripted import GatedModel, ScriptedModel
from agents.runtime import (
    Agent,
    AgentRunConfig,
    AgentRunContext,
    ExternalEvent,
    ExternalEventExtension,
)

from .conftest import wait

SESSION = AgentRunConfig(session_id="session-1")


class AskOperator(ExternalEventExtension):
    """Before the model runs, asks an operator question q1 and waits for the answer."""

    event_names = frozenset({"operator.answer"})

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.answers: list[Any] = []
        self.woken_on: list[int] = []
        self.request_ids: list[str] = []

    def parse_response(self, payload: Mapping[str, Any]) -> Any:
        if not isinstance(payload.get("text"), str):
            raise ValueError("an answer needs text")
        return payload["text"]

    async def before_run(self, context: AgentRunContext) -> None:
        self.request_ids.append(context.request_id)
        self.open_wait(context, "q1", {"question": "Proceed?"})
        self.asked.set()
        self.answers.append(await self.wait_for(context, "q1"))
        self.woken_on.append(threading.get_ident())


def answer(text: str = "yes", correlation_id: str = "q1") -> ExternalEvent:
    return ExternalEvent("operator.answer", {"id": correlation_id, "text": text})


async def start(extension: AskOperator, model: Any = None) -> tuple[Agent, asyncio.Task[Any]]:
    agent = Agent(model or ScriptedModel(["Done."]), extensions=[extension])
    run = asyncio.create_task(agent.run("go", config=SESSION))
    await wait(extension.asked.wait())
    return agent, run


async def test_emit_external_event_wakes_the_waiting_run_and_names_the_acceptor() -> None:
    ask = AskOperator()
    agent, run = await start(ask)
    assert ask.pending_waits("session-1") == [
        {"id": "q1", "request_id": ask.request_ids[0], "question": "Proceed?"}
    ]

    accepted = agent.emit_external_event(answer("yes"), config=SESSION)
    result = await wait(run)

    assert accepted == ["AskOperator"]
    assert ask.answers == ["yes"]
    assert result.content == "Done."
    assert ask.pending_waits("session-1") == []


async def test_accept_from_another_thread_wakes_the_run_on_its_own_loop() -> None:
    ask = AskOperator()
    agent, run = await start(ask)
    from_thread: list[list[str]] = []
    answering = threading.Thread(
        target=lambda: from_thread.append(agent.emit_external_event(answer(), config=SESSION))
    )

    answering.start()
    await asyncio.to_thread(answering.join)
    await wait(run)

    assert from_thread == [["AskOperator"]]
    assert ask.answers == ["yes"]
    assert ask.woken_on == [threading.get_ident()]


async def test_duplicate_answer_is_refused_and_changes_nothing() -> None:
    ask = AskOperator()
    agent, run = await start(ask)

    first = agent.emit_external_event(answer("first"), config=SESSION)
    second = agent.emit_external_event(answer("second"), config=SESSION)
    await wait(run)

    assert (first, second) == (["AskOperator"], [])
    assert ask.answers == ["first"]


@pytest.mark.parametrize(
    ("event", "config"),
    [
        (answer(correlation_id="q-stale"), SESSION),
        (answer(), AgentRunConfig(session_id="someone-else")),
        (answer(), AgentRunConfig(session_id="session-1", request_id="old-request")),
        (ExternalEvent("operator.answer", {"id": "q1"}), SESSION),
        (ExternalEvent("other.protocol", {"id": "q1", "text": "yes"}), SESSION),
    ],
    ids=["stale-id", "foreign-session", "wrong-request", "bad-payload", "other-name"],
)
async def test_mismatched_answers_are_refused_and_leave_the_wait_open(
    event: ExternalEvent, config: AgentRunConfig | None
) -> None:
    ask = AskOperator()
    agent, run = await start(ask)

    refused = agent.emit_external_event(event, config=config)
    still_waiting = [wait["id"] for wait in ask.pending_waits("session-1")]
    exact = AgentRunConfig(session_id="session-1", request_id=ask.request_ids[0])
    accepted = agent.emit_external_event(answer("right"), config=exact)
    await wait(run)

    assert refused == []
    assert still_waiting == ["q1"]
    assert accepted == ["AskOperator"]
    assert ask.answers == ["right"]


class OpensTwo(ExternalEventExtension):
    """Opens waits q1 and q2, then waits for q1 only; the model may fail or block after."""

    event_names = frozenset({"operator.answer"})

    def __init__(self, *, await_first: bool) -> None:
        self.await_first = await_first
        self.asked = asyncio.Event()

    async def before_run(self, context: AgentRunContext) -> None:
        self.open_wait(context, "q1")
        self.open_wait(context, "q2")
        self.asked.set()
        if self.await_first:
            await self.wait_for(context, "q1")


async def test_cancellation_closes_every_open_wait() -> None:
    opener = OpensTwo(await_first=True)
    agent = Agent(ScriptedModel(["Done."]), extensions=[opener])
    run = asyncio.create_task(agent.run("go", config=SESSION))
    await wait(opener.asked.wait())
    assert [w["id"] for w in opener.pending_waits("session-1")] == ["q1", "q2"]

    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(run)

    assert opener.pending_waits("session-1") == []
    assert agent.emit_external_event(answer(correlation_id="q2"), config=SESSION) == []


async def test_failure_closes_every_open_wait() -> None:
    opener = OpensTwo(await_first=False)
    agent = Agent(ScriptedModel([RuntimeError("model failed")]), extensions=[opener])

    with pytest.raises(RuntimeError, match="model failed"):
        await agent.run("go", config=SESSION)

    assert opener.pending_waits("session-1") == []
    assert agent.emit_external_event(answer(), config=SESSION) == []


async def test_cancellation_while_another_hook_blocks_closes_waits_opened_earlier() -> None:
    opener = OpensTwo(await_first=False)
    model = GatedModel(["Never."])
    agent = Agent(model, extensions=[opener])
    run = asyncio.create_task(agent.run("go", config=SESSION))
    await wait(model.entered.wait())

    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait(run)

    assert opener.pending_waits("session-1") == []


class Counter(ExternalEventExtension):
    """Accepts any "count" event for any session (a deliberately loose protocol)."""

    event_names = frozenset({"count"})

    def __init__(self, name: str, answer: bool) -> None:
        self.name = name
        self.answer = answer
        self.offered = 0

    def accept(self, config: AgentRunConfig | None, event: ExternalEvent) -> bool:
        self.offered += 1
        return self.answer


class Broken(ExternalEventExtension):
    priority = 50

    def accept(self, config: AgentRunConfig | None, event: ExternalEvent) -> bool:
        raise RuntimeError("accept is broken")


def test_emit_external_event_offers_every_extension_and_lists_acceptors_in_order() -> None:
    declines = Counter("declines", False)
    late = Counter("late", True)
    late.priority = 200  # type: ignore[misc]
    early = Counter("early", True)
    agent = Agent(ScriptedModel(), extensions=[late, declines, Broken(), early])

    accepted = agent.emit_external_event(ExternalEvent("count"), config=SESSION)

    assert accepted == ["early", "late"]
    assert (declines.offered, early.offered, late.offered) == (1, 1, 1)


async def test_without_a_config_the_only_active_request_gets_the_event() -> None:
    ask = AskOperator()
    agent, run = await start(ask)

    accepted = agent.emit_external_event(answer("from the monitor"))
    await wait(run)

    assert accepted == ["AskOperator"]
    assert ask.answers == ["from the monitor"]


async def test_without_a_config_and_two_active_requests_nobody_is_addressed() -> None:
    ask = AskOperator()
    agent = Agent(ScriptedModel(["Done.", "Done."]), extensions=[ask])
    first = asyncio.create_task(agent.run("go", config=SESSION))
    await wait(ask.asked.wait())
    ask.asked.clear()
    other = AgentRunConfig(session_id="session-2")
    second = asyncio.create_task(agent.run("go", config=other))
    await wait(ask.asked.wait())

    refused = agent.emit_external_event(answer("for whom?"))
    for config in (SESSION, other):
        assert agent.emit_external_event(answer(), config=config) == ["AskOperator"]
    await wait(asyncio.gather(first, second))

    assert refused == []
    assert ask.answers == ["yes", "yes"]
