"""Runtime overhead benchmark W1: our agents.runtime against the peer zett-agent, same workload.

W1 is R sequential runs, each on its own session, of three turns: two turns stream 20 text
deltas and ask for one ``add`` tool call, the third streams 20 deltas and answers. The model is
in-process and never sleeps, so what is measured is the runtime's own cost per event: lifecycle
hooks of six extensions (the in-memory accumulator plus five that override every hook with a
no-op), the model and tool onions, message bookkeeping and the outward event stream.

Our side runs in this interpreter; the peer side runs ``bench/peer_w1.py --serve`` with the peer
virtualenv's Python (``bench/.peer-venv``, made by ``bench/run.sh``), which answers each request
for a timed pass with a JSON line, so the two sides' passes alternate.

    .venv/bin/python bench/runtime_overhead.py [--runs 2000] [--repeat 3] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _counting  # noqa: E402  (bench/, beside this script)

from agents.runtime import (  # noqa: E402
    Agent,
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    InMemoryMessageAccumulator,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    ToolCall,
    ToolMessage,
    tool,
)

DELTAS_PER_TURN = 20
TOOL_TURNS = 2  # turns that end in one `add` call; one answering turn follows
NOOP_EXTENSIONS = 5
TARGET_RATIO = 3.0
PEER_PYTHON = BENCH / ".peer-venv" / "bin" / "python"
RESULTS = BENCH / "results" / "runtime_overhead.json"

#: Our hooks that every no-op extension overrides (``accept`` is never called in W1).
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


# -- the workload -----------------------------------------------------------------------


class W1Model:
    """Streams 20 text deltas per call; the first two calls each ask for one `add`."""

    def __init__(self) -> None:
        self.deltas = tuple(f"w{index} " for index in range(DELTAS_PER_TURN))
        self.text = "".join(self.deltas)
        self.usage = ModelUsage(input_tokens=10, output_tokens=DELTAS_PER_TURN)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        # Which turn this is comes from the request itself (tool results so far), as a
        # provider would see it: every run is on a fresh session.
        answered = sum(1 for message in request.messages if isinstance(message, ToolMessage))
        for delta in self.deltas:
            yield ModelEvent.text(delta)
        if answered < TOOL_TURNS:
            call = ToolCall(f"call-{answered}", "add", {"a": answered, "b": 2})
            message = AssistantMessage(self.text, tool_calls=(call,))
            yield ModelEvent.completed(ModelResponse(message, "tool_calls", self.usage))
        else:
            answer = AssistantMessage(self.text)
            yield ModelEvent.completed(ModelResponse(answer, "stop", self.usage))


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
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

    async def on_model_request(
        self, context: Any, request: Any, call_next: Callable[[Any], AsyncIterator[Any]]
    ) -> AsyncIterator[Any]:
        async with aclosing(call_next(request)) as inner:
            async for event in inner:
                yield event

    async def after_model(self, context: Any, response: Any) -> None:
        pass

    async def before_tool(self, context: Any, call: Any) -> None:
        pass

    async def on_tool_call(self, context: Any, call: Any, call_next: Any) -> Any:
        return await call_next(call)

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


def counting_extension(counts: dict[str, int]) -> type[NoOpExtension]:
    """A NoOpExtension subclass whose hooks count their calls (for the equivalence check)."""
    return _counting.counting_extension(NoOpExtension, HOOKS, counts)


def build_agent(counts: dict[str, int] | None = None) -> Agent:
    kind = NoOpExtension if counts is None else counting_extension(counts)
    noops = []
    for index in range(NOOP_EXTENSIONS):
        extension = kind()
        extension.name = f"noop-{index}"
        noops.append(extension)
    return Agent(W1Model(), tools=[add], extensions=[InMemoryMessageAccumulator(), *noops])


async def run_w1(agent: Agent, runs: int, tag: str) -> int:
    """Stream `runs` requests on distinct sessions; return how many outward events arrived."""
    events = 0
    for index in range(runs):
        config = AgentRunConfig(session_id=f"w1-{tag}-{index}")
        async for _event in agent.stream("add things up", config=config):
            events += 1
    return events


async def timed_pass(runs: int, tag: str) -> tuple[float, float, int]:
    """One pass on a fresh Agent: (wall seconds, process CPU seconds, outward events)."""
    agent = build_agent()
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    events = await run_w1(agent, runs, tag)
    return time.perf_counter() - started, time.process_time() - cpu_started, events


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


def one_run_census() -> tuple[dict[str, int], dict[str, int]]:
    """One run's outward event types and hook calls, so the two sides can be compared."""

    async def main() -> tuple[dict[str, int], dict[str, int]]:
        events: dict[str, int] = {}
        hooks: dict[str, int] = {}
        agent = build_agent(hooks)
        async for event in agent.stream("add things up", config=AgentRunConfig(session_id="eq")):
            events[event.type.value] = events.get(event.type.value, 0) + 1
        per_extension = {hook: count // NOOP_EXTENSIONS for hook, count in hooks.items()}
        return dict(sorted(events.items())), dict(sorted(per_extension.items()))

    return asyncio.run(main())


NOTES = [
    "events/run differ by design: ours streams RUN_STARTED, the peer streams CONTENT_STARTED"
    " and CONTENT_COMPLETED around each text segment, so compare runs/s first",
    "on_event counts differ by design: each runtime publishes its own internal events",
]

#: Outward events both runtimes have; W1 must produce the same number of each on both sides.
SHARED_EVENTS = (
    "model_started",
    "text_delta",
    "model_completed",
    "tool_started",
    "tool_completed",
    "run_completed",
)


def differences(ours: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """Where the two sides did not do the same work (on_event counts differ by design)."""
    found = []
    for kind in SHARED_EVENTS:
        mine, theirs = ours["event_types"].get(kind, 0), peer["event_types"].get(kind, 0)
        if mine != theirs:
            found.append(f"{kind}: ours {mine}, peer {theirs}")
    for hook in HOOKS:
        if hook == "on_event":
            continue
        mine = ours["hook_calls_per_extension"].get(hook, 0)
        theirs = peer["hook_calls_per_extension"].get(hook, 0)
        if mine != theirs:
            found.append(f"{hook} calls: ours {mine}, peer {theirs}")
    return found


# -- the peer ---------------------------------------------------------------------------


class PeerProcess:
    """bench/peer_w1.py in --serve mode under the peer's Python: one timed pass per request."""

    def __init__(self, python: Path, runs: int, warmup: int) -> None:
        command = [str(python), str(BENCH / "peer_w1.py"), "--serve"]
        command += ["--runs", str(runs), "--warmup", str(warmup)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=BENCH
        )
        self.read()  # the ready line: the peer has imported and warmed up

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("{"):
            self.process.kill()
            raise SystemExit(f"the peer benchmark stopped (exit {self.process.wait()}): {line!r}")
        result: dict[str, Any] = json.loads(line)
        return result

    def send(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def timed_pass(self) -> tuple[float, float, int]:
        result = self.send("pass")
        return result["wall"], result["cpu"], result["events"]

    def finish(self) -> dict[str, Any]:
        summary = self.send("done")
        self.process.wait(timeout=60)
        return summary


def measure(
    runs: int, repeat: int, warmup: int, peer_python: Path | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Warm both sides up, then alternate one timed pass of ours and one of the peer's.

    Alternating keeps a burst of load from other processes from landing on one side only.
    """
    peer = PeerProcess(peer_python, runs, warmup) if peer_python is not None else None
    passes: list[tuple[float, float, int]] = []
    try:
        with asyncio.Runner() as runner:
            runner.run(run_w1(build_agent(), warmup, "warmup"))
            for attempt in range(repeat):
                passes.append(runner.run(timed_pass(runs, f"pass{attempt}")))
                if peer is not None:
                    peer.timed_pass()
        summary = peer.finish() if peer is not None else None
    except BaseException:
        if peer is not None:
            peer.process.kill()
        raise
    ours = summarise(passes, runs)
    ours["event_types"], ours["hook_calls_per_extension"] = one_run_census()
    return ours, summary


# -- profile ----------------------------------------------------------------------------


def profile_ours(runs: int, limit: int = 30) -> str:
    """cProfile one pass of our side; the top functions by own time, runtime frames only."""
    profiler = cProfile.Profile()

    async def main() -> None:
        agent = build_agent()
        await run_w1(agent, min(runs, 100), "profile-warmup")
        profiler.enable()
        await run_w1(agent, runs, "profile")
        profiler.disable()

    asyncio.run(main())
    report = io.StringIO()
    stats = pstats.Stats(profiler, stream=report)
    stats.sort_stats("tottime").print_stats(limit)
    report.write("\n-- agents/ frames by cumulative time --\n")
    stats.sort_stats("cumulative").print_stats(r"agents[/\\]", limit)
    return report.getvalue()


# -- report -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def print_table(ours: dict[str, Any], peer: dict[str, Any] | None, host: dict[str, Any]) -> None:
    print(
        f"machine: nproc={host['nproc']} (cpu_count={host['cpu_count']}), "
        f"{host['implementation']} {host['python']}, {host['platform']}"
    )
    print(
        f"W1: {ours['runs']} runs x 3 turns ({DELTAS_PER_TURN} text deltas each, "
        f"{TOOL_TURNS} add tool calls), accumulator + {NOOP_EXTENSIONS} all-hook no-op "
        "extensions; best of the timed passes after a warm-up (wall clock; cpu = process time)"
    )
    rows = [("ours (agents.runtime)", ours)]
    if peer is not None:
        rows.append((f"peer (zett-agent {peer.get('version', '?')})", peer))
    print()
    print(
        f"{'side':<28}{'python':>9}{'runs/s':>10}{'µs/event':>10}{'events/run':>12}"
        f"{'cpu runs/s':>12}"
    )
    for label, row in rows:
        print(
            f"{label:<28}{row['python']:>9}{row['runs_per_s']:>10.1f}"
            f"{row['us_per_event']:>10.2f}{row['events_per_run']:>12.1f}"
            f"{row['cpu_runs_per_s']:>12.1f}"
        )
    print(
        "passes runs/s: "
        + "; ".join(
            f"{label.split()[0]} " + ", ".join(f"{value:.0f}" for value in row["all_runs_per_s"])
            for label, row in rows
        )
    )
    if peer is None:
        return
    ratio = ours["runs_per_s"] / peer["runs_per_s"]
    verdict = "meets" if ratio >= TARGET_RATIO else "BELOW"
    print()
    cpu_ratio = ours["cpu_runs_per_s"] / peer["cpu_runs_per_s"]
    print(f"ratio ours/peer runs/s: {ratio:.2f}x ({verdict} the {TARGET_RATIO:.0f}x target)")
    print(f"ratio ours/peer cpu runs/s (process CPU time, robust to other load): {cpu_ratio:.2f}x")
    print()
    print("per run, outward events by type (ours / peer):")
    kinds = sorted(set(ours["event_types"]) | set(peer["event_types"]))
    print(
        "  "
        + ", ".join(
            f"{kind} {ours['event_types'].get(kind, 0)}/{peer['event_types'].get(kind, 0)}"
            for kind in kinds
        )
    )
    print("per run, calls of each hook on one no-op extension (ours / peer):")
    print(
        "  "
        + ", ".join(
            f"{hook} {ours['hook_calls_per_extension'].get(hook, 0)}"
            f"/{peer['hook_calls_per_extension'].get(hook, 0)}"
            for hook in HOOKS
        )
    )
    if peer.get("missing_hooks"):
        print(f"hooks of ours with no peer equivalent: {peer['missing_hooks']}")
    else:
        print("every hook of ours has a peer equivalent; on_error and on_compact never fire in W1")
    for note in NOTES + peer.get("notes", []):
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per timed pass")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes; the best counts")
    parser.add_argument("--warmup", type=int, default=200, help="runs in the warm-up pass")
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS}")
    parser.add_argument("--no-peer", action="store_true", help="measure our side only")
    parser.add_argument("--peer-python", type=Path, default=PEER_PYTHON)
    parser.add_argument("--profile", action="store_true", help="cProfile one pass of our side")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.repeat < 1 or args.warmup < 0:
        parser.error("--runs and --repeat must be positive, --warmup not negative")

    host = machine()
    peer_python = None if args.no_peer else args.peer_python
    if peer_python is not None and not peer_python.exists():
        parser.error(f"{peer_python} is missing: run bench/run.sh to create it")
    ours, peer = measure(args.runs, args.repeat, args.warmup, peer_python)
    print_table(ours, peer, host)
    if peer is not None and (problems := differences(ours, peer)):
        print("\nthe two workloads are NOT equivalent:\n  " + "\n  ".join(problems))
        return 1

    if args.json:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "workload": "W1",
            "machine": host,
            "ours": ours,
            "peer": peer,
            "ratio_runs_per_s": ours["runs_per_s"] / peer["runs_per_s"] if peer else None,
            "ratio_cpu_runs_per_s": (
                ours["cpu_runs_per_s"] / peer["cpu_runs_per_s"] if peer else None
            ),
            "target_ratio": TARGET_RATIO,
            "argv": sys.argv[1:] if argv is None else argv,
        }
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    if args.profile:
        print()
        print(profile_ours(args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
