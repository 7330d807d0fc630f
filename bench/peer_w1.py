"""Workload W1 written against the peer runtime (zett-agent 0.2.1), printed as one JSON line.

Run with the peer virtualenv's Python (``bench/.peer-venv/bin/python``); it imports nothing
from this repository. ``bench/runtime_overhead.py`` runs it and reads the last line. The
workload mirrors ours: R sequential runs on distinct sessions, three turns each (two stream
20 text deltas and ask for one ``add`` call, the third streams 20 deltas and answers), the
peer's in-memory accumulator plus five extensions overriding every hook with a no-op.

    bench/.peer-venv/bin/python bench/peer_w1.py --runs 2000 --repeat 3 --warmup 200
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import time
from contextlib import aclosing
from importlib.metadata import version
from typing import Any

import _counting  # bench/, beside this script
from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.base import AgentExtension
from zett_agent.extensions.memory import InMemoryMessageAccumulator
from zett_agent.messages import AssistantMessage, ToolCall, ToolMessage
from zett_agent.model import ModelEvent, ModelResponse, ModelUsage, RetryOptions
from zett_agent.tools.base import tool

DELTAS_PER_TURN = 20
TOOL_TURNS = 2
NOOP_EXTENSIONS = 5

#: The peer's hooks the no-op extensions override: the same seventeen as on our side.
HOOKS = (
    "on_tool",
    "on_state",
    "on_message",
    "before_run",
    "before_turn",
    "before_model",
    "on_model_request",
    "after_model",
    "before_tool",
    "on_tool_call",
    "after_tool",
    "after_turn",
    "after_run",
    "on_success",
    "on_error",
    "on_compact",
    "on_event",
)


class W1Model:
    """Streams 20 text deltas per call; the first two calls each ask for one `add`."""

    retry = RetryOptions(max_retries=0)  # an offline model has nothing to retry

    def __init__(self) -> None:
        self.deltas = tuple(f"w{index} " for index in range(DELTAS_PER_TURN))
        self.text = "".join(self.deltas)
        self.usage = ModelUsage(input_tokens=10, output_tokens=DELTAS_PER_TURN)

    async def stream(self, request: Any) -> Any:
        answered = sum(1 for message in request.messages if isinstance(message, ToolMessage))
        for delta in self.deltas:
            yield ModelEvent.text(delta)
        if answered < TOOL_TURNS:
            call = ToolCall(id=f"call-{answered}", name="add", arguments={"a": answered, "b": 2})
            message = AssistantMessage(content=self.text, tool_calls=(call,))
            yield ModelEvent.completed(ModelResponse(message, "tool_calls", self.usage))
        else:
            answer = AssistantMessage(content=self.text)
            yield ModelEvent.completed(ModelResponse(answer, "stop", self.usage))


# The peer's @tool insists on an Args section and at least one guideline in the docstring.
@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.

    Guidelines:
        - Call it to sum two whole numbers.
    """
    return a + b


class NoOpExtension(AgentExtension):
    """Overrides every lifecycle hook and does nothing in it (the model onion passes through)."""

    async def on_tool(self, context: Any) -> None:
        pass

    async def on_state(self, context: Any) -> None:
        pass

    async def on_message(self, context: Any) -> None:
        pass

    async def before_run(self, context: Any) -> None:
        pass

    async def before_turn(self, context: Any) -> None:
        pass

    async def before_model(self, context: Any, request: Any) -> None:
        pass

    async def on_model_request(self, context: Any, request: Any, call_next: Any) -> Any:
        async with aclosing(call_next(request)) as inner:
            async for event in inner:
                yield event

    async def after_model(self, context: Any, response: Any) -> None:
        pass

    async def before_tool(self, context: Any, call: Any) -> None:
        pass

    async def on_tool_call(self, context: Any, call: Any, call_next: Any) -> Any:
        # The peer's call_next takes no arguments (its ToolCallNext is Callable[[], ...]).
        return await call_next()

    async def after_tool(self, context: Any, call: Any, result: Any, error: Any) -> None:
        pass

    async def after_turn(self, context: Any, result: Any) -> None:
        pass

    async def after_run(self, context: Any, result: Any) -> None:
        pass

    async def on_success(self, context: Any, result: Any) -> None:
        pass

    async def on_error(self, context: Any, error: Any) -> None:
        pass

    async def on_compact(self, context: Any) -> None:
        pass

    async def on_event(self, context: Any, event: Any) -> None:
        pass


def missing_hooks() -> list[str]:
    """Hooks of ours that the peer's extension base class does not have (expected: none)."""
    return [hook for hook in HOOKS if not callable(getattr(AgentExtension, hook, None))]


def counting_extension(counts: dict[str, int]) -> type[NoOpExtension]:
    """A NoOpExtension subclass whose hooks count their calls (for the equivalence check)."""
    return _counting.counting_extension(NoOpExtension, HOOKS, counts)


async def build_agent(counts: dict[str, int] | None = None) -> Agent:
    kind = NoOpExtension if counts is None else counting_extension(counts)
    noops = []
    for index in range(NOOP_EXTENSIONS):
        extension = kind()
        extension.name = f"noop-{index}"
        noops.append(extension)
    agent = Agent(W1Model(), tools=[add], extensions=[InMemoryMessageAccumulator(), *noops])
    await agent.initialize()
    return agent


async def run_w1(agent: Agent, runs: int, tag: str) -> int:
    events = 0
    for index in range(runs):
        config = AgentRunConfig(session_id=f"w1-{tag}-{index}")
        async for _event in agent.stream("add things up", config=config):
            events += 1
    return events


async def one_run_census() -> tuple[dict[str, int], dict[str, int]]:
    """One run's outward event types and hook calls, so the two sides can be compared."""
    events: dict[str, int] = {}
    hooks: dict[str, int] = {}
    agent = await build_agent(hooks)
    async for event in agent.stream("add things up", config=AgentRunConfig(session_id="eq")):
        events[event.type.value] = events.get(event.type.value, 0) + 1
    return dict(sorted(events.items())), dict(sorted(hooks.items()))


def summarise(passes: list[tuple[float, float, int]], runs: int) -> dict[str, Any]:
    """Best pass by wall clock, and best by process CPU time (less hurt by other load)."""
    seconds, _, events = min(passes)
    cpu_seconds = min(cpu for _, cpu, _ in passes)
    return {
        "runs": runs,
        "seconds": seconds,
        "runs_per_s": runs / seconds,
        "us_per_event": seconds / events * 1e6,
        "events_per_run": events / runs,
        "cpu_seconds": cpu_seconds,
        "cpu_runs_per_s": runs / cpu_seconds,
        "all_runs_per_s": [runs / wall for wall, _, _ in passes],
        "python": platform.python_version(),
    }


async def timed_pass(runs: int, tag: str) -> tuple[float, float, int]:
    """One pass on a fresh Agent: (wall seconds, process CPU seconds, outward events)."""
    agent = await build_agent()
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    events = await run_w1(agent, runs, tag)
    return time.perf_counter() - started, time.process_time() - cpu_started, events


async def describe() -> dict[str, Any]:
    """What the peer ran: version, extensions, one run's census, and the differences."""
    probe = await build_agent()
    extension_names = [extension.name for extension in probe.extensions]
    built_ins = [
        name
        for name in extension_names
        if name != "InMemoryMessageAccumulator" and not name.startswith("noop-")
    ]
    event_types, hook_calls = await one_run_census()
    notes = [
        f"the peer always adds its built-in extensions {built_ins}, which cannot be removed;"
        " ours keeps steering inside the runtime",
        "the peer's on_tool_call call_next takes no arguments; ours takes the (possibly edited)"
        " ToolCall",
    ]
    missing = missing_hooks()
    if missing:
        notes.append(f"hooks of ours with no peer equivalent: {missing}")
    return {
        "version": version("zett-agent"),
        "extensions": extension_names,
        "event_types": event_types,
        "hook_calls_per_extension": {hook: n // NOOP_EXTENSIONS for hook, n in hook_calls.items()},
        "missing_hooks": missing,
        "notes": notes,
    }


def emit(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="after the warm-up print a ready line, then run one timed pass per 'pass' line on"
        " stdin (one JSON line each) and print the summary on 'done'; lets the caller"
        " interleave the two sides' passes",
    )
    args = parser.parse_args()
    with asyncio.Runner() as runner:
        runner.run(run_w1(runner.run(build_agent()), args.warmup, "warmup"))
        passes: list[tuple[float, float, int]] = []
        if args.serve:
            emit({"ready": True})
            for line in sys.stdin:
                if line.strip() != "pass":
                    break
                wall, cpu, events = runner.run(timed_pass(args.runs, f"pass{len(passes)}"))
                passes.append((wall, cpu, events))
                emit({"wall": wall, "cpu": cpu, "events": events})
        else:
            for attempt in range(args.repeat):
                passes.append(runner.run(timed_pass(args.runs, f"pass{attempt}")))
        if not passes:
            raise SystemExit("no timed pass was run")
        emit({**summarise(passes, args.runs), **runner.run(describe())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
