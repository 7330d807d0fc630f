"""Tracing overhead on W1: the same runs with the tracing extension off and on, in one invocation.

W1 is runtime_overhead.py's workload (three turns, 20 deltas each, two tool calls, the
accumulator plus five extensions overriding every hook). "On" adds the TracingExtension with
the OpenTelemetry SDK's TracerProvider and BatchSpanProcessor, as OTEL_EXPORTER_OTLP_ENDPOINT
sets it up, exporting to an exporter that drops the batches: what is measured is the cost on
the run's event loop (spans, attributes, events, the processor's queue), not the network.
Passes alternate off/on; the best of each counts. Target: on keeps at least 90% of off's runs/s.

Every span must reach the exporter: the processor's queue holds a whole pass (the SDK's default
of 2048 overflows at W1's ~10k spans/s whenever its export thread waits for a core, and then
drops spans), and the spans exported are counted against the spans W1 makes, 1 invoke_agent +
3 chat + 2 execute_tool per run. A pass that lost any fails the run.

``--model-latency S`` makes every model call wait S seconds before it streams, as a provider
does (W1 proper has none, so it shows the tracing cost against the runtime's own ~8 µs per
event; with a latency it shows what that cost is next to a model).

    .venv/bin/python bench/tracing_overhead.py [--runs 2000] [--repeat 5] [--model-latency 0]
                                               [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from runtime_overhead import TOOL_TURNS, W1Model, add, build_agent, run_w1  # noqa: E402

from agents.extensions.tracing import TracingExtension, build_tracer_provider  # noqa: E402
from agents.runtime import Agent, ModelEvent, ModelRequest  # noqa: E402

TARGET = 0.9
#: One invoke_agent span, a chat span per model call and an execute_tool span per tool call.
SPANS_PER_RUN = 1 + (TOOL_TURNS + 1) + TOOL_TURNS
RESULTS = BENCH / "results" / "tracing_overhead.json"


class Dropping(SpanExporter):
    """Counts the spans it is handed and keeps none of them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class PacedModel(W1Model):
    """W1's model, waiting ``latency`` seconds before each call streams."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(self.latency)
        async for event in super().stream(request):
            yield event


def plain_agent(latency: float) -> Agent:
    plain = build_agent()
    if not latency:
        return plain
    return Agent(PacedModel(latency), tools=[add], extensions=list(plain.extensions))


def traced_agent(exporter: Dropping, runs: int, latency: float = 0.0) -> tuple[Agent, object]:
    # Room for a whole pass: what is measured is the cost of the spans, not of losing them.
    processor = BatchSpanProcessor(exporter, max_queue_size=max(2048, runs * SPANS_PER_RUN))
    provider = build_tracer_provider(processor)
    plain = build_agent()
    tracing = TracingExtension(
        tracer_provider=provider, agent_name="W1", provider="bench", model="w1"
    )
    model = PacedModel(latency) if latency else W1Model()
    agent = Agent(model, tools=[add], extensions=[tracing, *plain.extensions])
    return agent, provider


async def timed(agent: Agent, runs: int, tag: str) -> tuple[float, float, int]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    events = await run_w1(agent, runs, tag)
    return time.perf_counter() - wall, time.process_time() - cpu, events


async def main(args: argparse.Namespace) -> dict[str, object]:
    exporter = Dropping()
    latency = args.model_latency
    await run_w1(plain_agent(latency), args.warmup, "warm-off")
    warm, warm_provider = traced_agent(exporter, args.warmup, latency)
    await run_w1(warm, args.warmup, "warm-on")
    warm_provider.shutdown()  # type: ignore[attr-defined]
    best: dict[str, tuple[float, float]] = {"off": (float("inf"), float("inf"))}
    best["on"] = best["off"]
    exported: list[int] = []
    for attempt in range(args.repeat):
        wall, cpu, _ = await timed(plain_agent(latency), args.runs, f"off-{attempt}")
        best["off"] = (min(best["off"][0], wall), min(best["off"][1], cpu))
        exporter.spans = 0
        agent, provider = traced_agent(exporter, args.runs, latency)
        wall, cpu, _ = await timed(agent, args.runs, f"on-{attempt}")
        provider.shutdown()  # type: ignore[attr-defined]
        exported.append(exporter.spans)
        best["on"] = (min(best["on"][0], wall), min(best["on"][1], cpu))
    rate = {kind: args.runs / wall for kind, (wall, _) in best.items()}
    cpu_rate = {kind: args.runs / cpu for kind, (_, cpu) in best.items()}
    return {
        "runs": args.runs,
        "repeat": args.repeat,
        "model_latency_seconds": latency,
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version()},
        "off_runs_per_s": round(rate["off"], 1),
        "on_runs_per_s": round(rate["on"], 1),
        "ratio": round(rate["on"] / rate["off"], 3),
        "cpu_ratio": round(cpu_rate["on"] / cpu_rate["off"], 3),
        "spans_expected_per_pass": args.runs * SPANS_PER_RUN,
        "spans_exported_per_pass": exported,
        "spans_dropped": sum(args.runs * SPANS_PER_RUN - count for count in exported),
        "target": TARGET,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--model-latency", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS}")
    options = parser.parse_args()
    result = asyncio.run(main(options))
    print(
        f"W1 tracing off {result['off_runs_per_s']} runs/s, on {result['on_runs_per_s']} runs/s: "
        f"on/off {result['ratio']} (cpu {result['cpu_ratio']}, target >= {TARGET}); "
        f"spans exported per pass {result['spans_exported_per_pass']} of "
        f"{result['spans_expected_per_pass']} ({result['spans_dropped']} dropped)"
    )
    if options.json:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if result["ratio"] >= TARGET and not result["spans_dropped"] else 1)
