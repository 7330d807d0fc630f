"""Tracing's cost on W1 in instructions: a figure the host's noise cannot move.

``tracing_overhead.py`` times W1 with tracing off and on; on a shared 2-core host single
invocations of it spread by several percent, more than the margin being measured. This
benchmark counts instead: each kind of pass (off, spans only, on; see tracing_overhead.py)
runs in a child process under valgrind's callgrind, once with ``--runs`` runs and once with
none, and the difference divided by the runs is the instructions one W1 run costs. The same
binary, inputs and hash seed give the same count whatever else the machine does. It is not
the throughput the issue's target speaks of (a traced run also misses caches more and
predicts branches worse, which instructions do not show), only its floor: the "on" ratio
here is what the timed ratio would be if every instruction cost the same.

    .venv/bin/python bench/tracing_instructions.py [--runs 2000] [--json]

Needs valgrind (Debian's package). The children run two at a time; a pass takes about a
minute at 2000 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results" / "tracing_instructions.json"
KINDS = ("off", "spans_only", "on")
WARMUP = 50  # runs of every child before the counted ones, whatever --runs is
_COLLECTED = re.compile(r"Collected : (\d+)")


def child(kind: str, runs: int) -> None:
    """One pass of ``kind``, as tracing_overhead.py times it; prints the spans made."""
    for path in (str(ROOT), str(BENCH)):
        if path not in sys.path:
            sys.path.insert(0, path)
    import tracing_overhead as timed
    from runtime_overhead import run_w1

    async def main() -> int:
        await run_w1(timed.plain_agent(0.0), WARMUP, "warm")
        exporter, dropper, provider = timed.Dropping(), timed.DropAtEnd(), None
        if kind == "off":
            agent = timed.plain_agent(0.0)
        else:
            processor = dropper if kind == "spans_only" else None
            agent, provider = timed.traced_agent(exporter, max(runs, 1), 0.0, processor)
        await run_w1(agent, WARMUP, "warm-kind")
        if runs:
            await run_w1(agent, runs, kind)
        if provider is not None:
            provider.force_flush()
            provider.shutdown()
        return exporter.spans + dropper.spans

    print(f"spans {asyncio.run(main())}")


def count(kind: str, runs: int) -> tuple[int, int]:
    """Instructions of one child under callgrind, and the spans it reported."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            kind,
            str(runs),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"{kind} with {runs} runs failed under valgrind:\n{done.stderr[-2000:]}")
    spans = int(done.stdout.split()[-1])
    return int(found.group(1)), spans


def main(runs: int) -> dict[str, object]:
    jobs = [(kind, n) for kind in KINDS for n in (0, runs)]
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        counted = dict(zip(jobs, pool.map(lambda job: count(*job), jobs), strict=True))
    per_run = {kind: (counted[kind, runs][0] - counted[kind, 0][0]) / runs for kind in KINDS}
    spans_per_run = 6  # 1 invoke_agent + 3 chat + 2 execute_tool
    for kind in ("spans_only", "on"):
        made = counted[kind, runs][1]
        expected = (WARMUP + runs) * spans_per_run  # the warm-up on the kind's agent too
        if made != expected:
            raise SystemExit(f"{kind}: {made} spans, expected {expected}")
    return {
        "runs": runs,
        "instructions_per_run": {kind: round(value) for kind, value in per_run.items()},
        "ratio": {
            kind: round(per_run["off"] / per_run[kind], 3) for kind in KINDS if kind != "off"
        },
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS}")
    options = parser.parse_args()
    if options.runs <= 0:
        parser.error("--runs must be positive")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    result = main(options.runs)
    costs = result["instructions_per_run"]
    print(
        f"W1 instructions per run: off {costs['off']:,}, spans only {costs['spans_only']:,}, "
        f"on {costs['on']:,}; off/other {result['ratio']} (by instruction count, "
        f"{options.runs} runs a pass, callgrind)"
    )
    if options.json:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
