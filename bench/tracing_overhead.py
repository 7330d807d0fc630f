"""Tracing overhead on W1: the same runs with the tracing extension off and on, in one invocation.

W1 is runtime_overhead.py's workload (three turns, 20 deltas each, two tool calls, the
accumulator plus five extensions overriding every hook). "On" adds the TracingExtension with
the OpenTelemetry SDK's TracerProvider and our SpanBatches processor, as
OTEL_EXPORTER_OTLP_ENDPOINT sets it up (``--breakdown`` adds the SDK's BatchSpanProcessor),
exporting to an exporter that drops the batches: what is measured is the cost on the run's
event loop (spans, attributes, events, the processor's queue), not the network.
Passes alternate off/on, in reverse order every other round (so no kind always follows the
same one); the best of each counts. Target: on keeps at least 90% of off's runs/s.
A pass with tracing on ends when its processor has handed every span to the exporter
(``force_flush`` inside the timed window), so the export thread's work is counted.

``--breakdown`` adds a third kind of pass, "spans only": the same extension with a span
processor that drops each span at ``on_end`` (no queue, no export thread), which separates
building the spans from handing them to the batch processor. Each kind also reports the
process's voluntary context switches per run (``getrusage``): the export thread and the
event loop taking the interpreter lock in turns shows there.

Every span must reach the exporter: the processor's queue holds a whole pass (the SDK's default
of 2048 overflows at W1's ~10k spans/s whenever its export thread waits for a core, and then
drops spans), and the spans exported are counted against the spans W1 makes, 1 invoke_agent +
3 chat + 2 execute_tool per run. A pass that lost any fails the run.

``--model-latency S`` makes every model call wait S seconds before it streams, as a provider
does (W1 proper has none, so it shows the tracing cost against the runtime's own ~8 µs per
event; with a latency it shows what that cost is next to a model).

    .venv/bin/python bench/tracing_overhead.py [--runs 2000] [--repeat 5] [--model-latency 0]
                                               [--export-batch 512] [--breakdown] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from operator import truediv
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for path in (str(ROOT), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from runtime_overhead import TOOL_TURNS, W1Model, add, build_agent, run_w1  # noqa: E402

from agents.extensions.span_batches import SpanBatches  # noqa: E402
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


class DropAtEnd(SpanProcessor):
    """Takes each ended span and keeps nothing: the cost of building spans, alone."""

    def __init__(self) -> None:
        self.spans = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.spans += 1


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


def traced_agent(
    exporter: Dropping,
    runs: int,
    latency: float = 0.0,
    processor: SpanProcessor | str | None = None,
    export_batch: int = 512,
    queue: int | None = None,
) -> tuple[Agent, object]:
    if processor is None:
        # As configure_from_environment sets it up: its defaults but the batch size.
        processor = SpanBatches(exporter, max_export_batch_size=export_batch, max_queue_size=queue)
    elif processor == "sdk":
        # Room for a whole pass: what is measured is the cost of the spans, not of losing them.
        processor = BatchSpanProcessor(
            exporter,
            max_queue_size=max(2048, export_batch, runs * SPANS_PER_RUN),
            max_export_batch_size=export_batch,
        )
    provider = build_tracer_provider(processor)
    plain = build_agent()
    tracing = TracingExtension(
        tracer_provider=provider, agent_name="W1", provider="bench", model="w1"
    )
    model = PacedModel(latency) if latency else W1Model()
    agent = Agent(model, tools=[add], extensions=[tracing, *plain.extensions])
    return agent, provider


def stolen_seconds() -> float:
    """CPU time the hypervisor gave other guests, all of this machine's CPUs (Linux's
    /proc/stat "steal"; 0 elsewhere): a pass that has some ran on a busy host."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return 0.0
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


async def timed(
    agent: Agent, runs: int, tag: str, provider: object = None
) -> tuple[float, float, int, float]:
    """Wall and CPU seconds of one pass (the spans' export included), its voluntary
    context switches and the CPU seconds stolen from the machine meanwhile."""
    gc.collect()
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    stolen = stolen_seconds()
    wall, cpu = time.perf_counter(), time.process_time()
    await run_w1(agent, runs, tag)
    if provider is not None:
        provider.force_flush()  # type: ignore[attr-defined]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    switched = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
    return wall, cpu, switched, stolen_seconds() - stolen


async def main(args: argparse.Namespace) -> dict[str, object]:
    exporter = Dropping()
    latency = args.model_latency
    await run_w1(plain_agent(latency), args.warmup, "warm-off")
    warm, warm_provider = traced_agent(exporter, args.warmup, latency)
    await run_w1(warm, args.warmup, "warm-on")
    warm_provider.shutdown()  # type: ignore[attr-defined]
    kinds = ["off", "on", *(["spans_only", "sdk_batch"] if args.breakdown else [])]
    walls: dict[str, list[float]] = {kind: [] for kind in kinds}  # every pass, by round
    cpus: dict[str, list[float]] = {kind: [] for kind in kinds}
    switches: dict[str, list[int]] = {kind: [] for kind in kinds}
    stolen: dict[str, float] = dict.fromkeys(kinds, 0.0)
    exported: list[int] = []
    for attempt in range(args.repeat):
        for kind in kinds if attempt % 2 == 0 else kinds[::-1]:
            provider = None
            if kind == "off":
                agent = plain_agent(latency)
            elif kind in ("on", "sdk_batch"):
                exporter.spans = 0
                agent, provider = traced_agent(
                    exporter,
                    args.runs,
                    latency,
                    "sdk" if kind == "sdk_batch" else None,
                    export_batch=args.export_batch,
                    queue=args.queue,
                )
            else:
                dropper = DropAtEnd()
                agent, provider = traced_agent(exporter, args.runs, latency, dropper)
            wall, cpu, switched, lost = await timed(agent, args.runs, f"{kind}-{attempt}", provider)
            if provider is not None:
                provider.shutdown()  # type: ignore[attr-defined]
            if kind in ("on", "sdk_batch"):
                exported.append(exporter.spans)
            elif kind == "spans_only":
                exported.append(dropper.spans)  # also counted: every span must have been built
            walls[kind].append(wall)
            cpus[kind].append(cpu)
            switches[kind].append(switched)
            stolen[kind] += lost
    # Each round's off pass against the same round's other passes, the median over rounds:
    # a host that slows for seconds at a time slows both passes of a round alike.
    paired = {
        kind: round(statistics.median(map(truediv, walls["off"], walls[kind])), 3)
        for kind in kinds
        if kind != "off"
    }
    rate = {kind: args.runs / min(passes) for kind, passes in walls.items()}  # the best pass
    cpu_rate = {kind: args.runs / min(passes) for kind, passes in cpus.items()}
    breakdown = {}
    if args.breakdown:
        breakdown = {
            "spans_only_runs_per_s": round(rate["spans_only"], 1),
            "spans_only_ratio": round(rate["spans_only"] / rate["off"], 3),
            "spans_only_cpu_ratio": round(cpu_rate["spans_only"] / cpu_rate["off"], 3),
            "sdk_batch_runs_per_s": round(rate["sdk_batch"], 1),
            "sdk_batch_ratio": round(rate["sdk_batch"] / rate["off"], 3),
            "sdk_batch_cpu_ratio": round(cpu_rate["sdk_batch"] / cpu_rate["off"], 3),
        }
    return {
        "runs": args.runs,
        "repeat": args.repeat,
        "model_latency_seconds": latency,
        "export_batch": args.export_batch,
        "queue": args.queue,
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version()},
        "off_runs_per_s": round(rate["off"], 1),
        "on_runs_per_s": round(rate["on"], 1),
        "ratio": round(rate["on"] / rate["off"], 3),
        "cpu_ratio": round(cpu_rate["on"] / cpu_rate["off"], 3),
        "paired_ratio_median": paired,
        "stolen_cpu_seconds": {kind: round(value, 2) for kind, value in stolen.items()},
        **breakdown,
        "context_switches_per_run": {
            kind: round(min(counts) / args.runs, 2) for kind, counts in switches.items()
        },
        "spans_expected_per_pass": args.runs * SPANS_PER_RUN,
        "spans_exported_per_pass": exported,
        "spans_dropped": sum(args.runs * SPANS_PER_RUN - count for count in exported),  # both kinds
        "target": TARGET,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--model-latency", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument(
        "--export-batch",
        type=int,
        default=512,
        metavar="SPANS",
        help="the batch processor's max_export_batch_size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE; "
        "the SDK's default is 512)",
    )
    parser.add_argument(
        "--queue",
        type=int,
        default=None,
        metavar="SPANS",
        help="SpanBatches' max_queue_size (OTEL_BSP_MAX_QUEUE_SIZE; by default its own, 16384)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also time passes whose spans are dropped at on_end (building them, alone)",
    )
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS}")
    options = parser.parse_args()
    result = asyncio.run(main(options))
    print(
        f"W1 tracing off {result['off_runs_per_s']} runs/s, on {result['on_runs_per_s']} runs/s: "
        f"on/off {result['ratio']} (cpu {result['cpu_ratio']}, target >= {TARGET}); "
        f"spans exported per pass {result['spans_exported_per_pass']} of "
        f"{result['spans_expected_per_pass']} ({result['spans_dropped']} dropped); "
        f"voluntary context switches per run {result['context_switches_per_run']}"
    )
    print(
        f"median over rounds of each round's off/other pass ratio {result['paired_ratio_median']}; "
        f"CPU seconds stolen by the host during the passes {result['stolen_cpu_seconds']}"
    )
    if options.breakdown:
        print(
            f"spans only (dropped at on_end, no batch processor): "
            f"{result['spans_only_runs_per_s']} runs/s, on/off {result['spans_only_ratio']} "
            f"(cpu {result['spans_only_cpu_ratio']}); the SDK's BatchSpanProcessor instead: "
            f"{result['sdk_batch_runs_per_s']} runs/s, on/off {result['sdk_batch_ratio']} "
            f"(cpu {result['sdk_batch_cpu_ratio']})"
        )
    if options.json:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if result["ratio"] >= TARGET and not result["spans_dropped"] else 1)
