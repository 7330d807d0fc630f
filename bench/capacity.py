"""Capacity benchmark: N concurrent realistic agent runs on one Daphne, monitor open, 50 watched.

Every run is the same three-turn agent (the demo model, with the settings the issue asks for):
each turn waits ``--first-token-delay`` (1 s) like a remote model, streams 100 tokens at
50 tokens/s, then calls the demo ``wait`` tool, which sleeps ``--tool-seconds`` (2 s); after
the third tool result one more model call (1 s, 100 tokens) gives the answer. So a run at full
pace takes about 18 s and streams 400 tokens.

One step of N runs, against a fresh Daphne (SQLite file, in-memory layer):

1. one staff monitor socket opens (the live monitor page's socket) and stays open;
2. N chat sockets open, one per session, each waits for its snapshot (outside the figures);
3. the N messages go out at ``--start-rate`` per second (100/s); each socket stays open until
   its first token arrives (-> time to first token of every run), then all but ``--watched``
   (50, spread over the ramp) close: a closed tab never stops a run;
4. the watched chats measure every token's latency (bench/latency_probe.py stamps it when the
   model yields it; client and server share the clock) and check that each model call's
   tokens arrive once and in order;
5. the step ends when the Run table has no active run left (or a deadline passes); the Run
   table gives how many completed and how long each took against the ideal duration.

``server_cpu_cores`` is the server process's CPU seconds (/proc/PID/stat, user + system) per
wall second from the first message sent to the last run ended. A step passes when every run
completed, the slowest one at >= 80% of full pace, the watched p99 < 100 ms, the server under
one core, and no start was refused. ``--find-max`` runs steps (250, 500, 750, 1000 by default,
fresh server each, stop at the first failure) and reports the largest N that passed.

    .venv/bin/python bench/capacity.py --runs 1000 --json bench/results/capacity.json
    .venv/bin/python bench/capacity.py --find-max [--steps 250,500,750,1000]
    .venv/bin/python bench/capacity.py --runs 5          # a smoke run

Nothing here runs inside pytest. ``ZETT_BENCH_PROFILE_DIR=dir`` runs the server under cProfile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _harness as harness  # noqa: E402
from bench import streaming  # noqa: E402
from bench.latency_probe import MARKER  # noqa: E402

P99_TARGET_MS = 100.0
CPU_TARGET_CORES = 1.0
PACE_RATIO = 0.8  # the slowest run takes at most 1/0.8 of the ideal duration
GOAL_RUNS = 1000
DEFAULT_STEPS = (250, 500, 750, 1000)
CONNECT_TIMEOUT = 60.0
END_MARGIN_S = 60.0  # after the ramp and five ideal durations, a step gives up waiting
ACTIVE = ("queued", "running", "waiting")
# A monitor row's opening tag: its run and the status it shows (attributes in any order).
_ROW = re.compile(r'<tr [^>]*data-testid="monitor-row"[^>]*>')
_ROW_RUN = re.compile(r'data-request-id="([^"]+)"')
_ROW_STATUS = re.compile(r'data-status="([^"]+)"')


@dataclass(frozen=True, slots=True)
class Workload:
    """One run: `turns` tool turns, then the answer; every model call streams `tokens`."""

    turns: int
    first_token_delay: float
    tokens: int
    delay: float  # seconds per token
    tool_seconds: float

    @property
    def prompt(self) -> str:
        # The demo model's "wait S s K times": K turns calling the wait tool, then an answer.
        return f"wait {self.tool_seconds:g} s {self.turns} times"

    @property
    def model_calls(self) -> int:
        return self.turns + 1

    @property
    def ideal_seconds(self) -> float:
        """A run at full pace: each call's wait and words; each tool call's delta and sleep."""
        per_call = self.first_token_delay + self.tokens * self.delay
        return self.model_calls * per_call + self.turns * (self.delay + self.tool_seconds)


@dataclass(eq=False)
class Monitor:
    """The staff monitor socket (the live monitor page's): the status each row shows."""

    ws: Any = None
    reader: asyncio.Task[None] | None = None
    status: dict[str, str] = field(default_factory=dict)  # request id -> status shown
    frames: int = 0
    rows: int = 0
    bytes: int = 0
    closed: str = ""

    def active(self) -> int:
        return sum(1 for status in self.status.values() if status in ACTIVE)

    async def read(self) -> None:
        try:
            async for frame in self.ws:
                self.frames += 1
                self.bytes += len(frame)
                for tag in _ROW.findall(frame):
                    run, status = _ROW_RUN.search(tag), _ROW_STATUS.search(tag)
                    if run and status:
                        self.rows += 1
                        self.status[run.group(1)] = status.group(1)
        except Exception as exc:
            self.closed = repr(exc)


async def open_monitor(server: harness.Server, cookie: str) -> Monitor:
    monitor = Monitor()
    monitor.ws = await harness.open_ws(
        f"{server.ws_url}/ws/monitor/", cookie=cookie, origin=server.origin
    )
    monitor.reader = asyncio.create_task(monitor.read())
    return monitor


@dataclass(eq=False)
class RunClient:
    """One chat socket: its run as the client sees it."""

    session_id: str
    watched: bool
    ws: Any = None
    reader: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    first_token: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    sent_at: float | None = None
    replied_at: float | None = None
    reply: str = ""
    first_token_at: float | None = None
    last_token_at: float | None = None
    indices: list[int] = field(default_factory=list)  # per-call token indices, in arrival order
    latencies: list[float] = field(default_factory=list)  # seconds, yield -> receipt
    status: str = ""
    error: str = ""
    closed_by_us: bool = False

    def on_frame(self, frame: str, now: float) -> None:
        if "beforeend:#answer-" in frame:
            for escaped in streaming._DELTA.findall(frame):
                for index, stamp in MARKER.findall(unescape(escaped)):
                    self.indices.append(int(index))
                    self.latencies.append(now - float(stamp))
                    if self.first_token_at is None:
                        self.first_token_at = now
                        self.first_token.set()
                    self.last_token_at = now
        if 'data-reply="' in frame and not self.reply:
            match = streaming._REPLY.search(frame)
            if match:
                self.reply, self.replied_at = match.group(1), now
                if self.reply != "accepted":
                    self.fail(streaming._TAG.sub("", frame)[:200].strip() or "rejected")
        if 'data-testid="frame-error"' in frame:
            self.fail(streaming._TAG.sub("", frame)[:200].strip())
        if 'data-status="' in frame and self.sent_at is not None:
            match = streaming._TERMINAL.search(frame)
            if match:
                self.status = match.group(1)
                self.done.set()
                self.first_token.set()  # nothing more to wait for

    def fail(self, error: str) -> None:
        self.error = self.error or error
        self.first_token.set()
        self.done.set()

    async def read(self) -> None:
        first = True
        try:
            async for frame in self.ws:
                if first:
                    first = False
                    self.ready.set()  # the snapshot: nothing of this run yet
                    continue
                self.on_frame(frame, time.time())
        except Exception as exc:
            if not self.closed_by_us:
                self.fail(f"{type(exc).__name__}: {exc}")
        finally:
            if not self.closed_by_us and not self.done.is_set():
                self.fail("socket closed")
            self.ready.set()

    async def close(self) -> None:
        self.closed_by_us = True
        if self.ws is not None:
            try:
                await self.ws.close()
            except Exception:
                pass
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)

    def check(self, workload: Workload) -> dict[str, int]:
        """Each model call's tokens 0..tokens-1 once and in order. A run that did not
        complete is checked up to its last token: its unfinished call and the calls it never
        made are not losses (the completed count already fails the step)."""
        calls: list[list[int]] = []
        for index in self.indices:
            if index == 0 or not calls:
                calls.append([])
            calls[-1].append(index)
        finished = self.status == "completed"
        lost = extra = 0
        for position, call in enumerate(calls):
            whole = finished or position < len(calls) - 1
            wanted = set(range(workload.tokens if whole else max(call) + 1))
            lost += len(wanted - set(call))
            extra += len(call) - len(set(call) & wanted)
        return {
            "lost": lost,
            "extra": extra,
            "reordered": sum(
                1 for call in calls for a, b in zip(call, call[1:], strict=False) if b <= a
            ),
            "bad_calls": abs(len(calls) - workload.model_calls) if finished else 0,
        }


async def open_chats(server: harness.Server, cookie: str, clients: list[RunClient]) -> None:
    semaphore = asyncio.Semaphore(streaming.CONNECT_CONCURRENCY)

    async def one(client: RunClient) -> None:
        async with semaphore:
            client.ws = await harness.open_ws(
                f"{server.ws_url}/ws/sessions/{client.session_id}/",
                cookie=cookie,
                origin=server.origin,
            )
            client.reader = asyncio.create_task(client.read())
            await asyncio.wait_for(client.ready.wait(), CONNECT_TIMEOUT)

    results = await asyncio.gather(*(one(c) for c in clients), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(clients)} chats failed: {failures[0]!r}")


def run_rows(path: Path) -> list[tuple[str, float | None]]:
    """(status, seconds from started_at to finished_at) of every run, from the SQLite file."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = connection.execute(
            "SELECT status, (julianday(finished_at) - julianday(started_at)) * 86400.0 "
            "FROM agents_run"
        )
        return [(status, seconds) for status, seconds in rows]
    finally:
        connection.close()


def runqueue_wait_seconds(pid: int) -> float | None:
    """Seconds the process's live threads, summed, waited for a CPU while runnable (each
    /proc/PID/task/TID/schedstat): how busy the shared machine was for the server."""
    total, found = 0.0, False
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[1]) / 1e9
            found = True
        except (OSError, IndexError, ValueError):
            continue
    return total if found else None


def main_thread_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of the server's main thread: the event loop (Daphne runs it there)."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _spread(values: list[float], scale: float = 1000.0) -> dict[str, Any]:
    def cut(value: float | None) -> float | None:
        return None if value is None else round(value * scale, 2)

    return {
        "p50": cut(streaming.percentile(values, 50)),
        "p90": cut(streaming.percentile(values, 90)),
        "p99": cut(streaming.percentile(values, 99)),
        "max": cut(max(values) if values else None),
        "samples": len(values),
    }


async def hold(
    server: harness.Server,
    db_path: Path,
    cookie: str,
    staff_cookie: str,
    sessions: list[str],
    workload: Workload,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One step: N runs started over chat sockets, held to their end; the figures."""
    n = len(sessions)
    sample = min(args.watched, n)
    watched_at = {i * n // sample for i in range(sample)}  # spread over the whole ramp
    clients = [RunClient(sid, i in watched_at) for i, sid in enumerate(sessions)]
    body = json.dumps({"type": "message", "text": workload.prompt})
    # --no-monitor (a diagnosis, never a passing step): what the monitor socket costs.
    monitor = Monitor() if args.no_monitor else await open_monitor(server, staff_cookie)
    active_samples: list[tuple[float, int]] = []
    try:
        connect_started = time.time()
        await open_chats(server, cookie, clients)
        connect_s = time.time() - connect_started
        await asyncio.sleep(0.5)  # the connects' own ORM work drains before the clock starts

        cpu_start = streaming.process_cpu_seconds(server.process.pid)
        client_cpu_start, loadavg_start = time.process_time(), os.getloadavg()
        wait_start = runqueue_wait_seconds(server.process.pid)
        loop_start = main_thread_cpu_seconds(server.process.pid)
        started = time.time()

        async def start(position: int, client: RunClient) -> None:
            await asyncio.sleep(max(0.0, started + position / args.start_rate - time.time()))
            client.sent_at = time.time()
            try:
                await client.ws.send(body)
            except Exception as exc:
                client.fail(f"send: {exc!r}")
                return
            if client.watched:
                return
            try:
                await asyncio.wait_for(client.first_token.wait(), workload.ideal_seconds * 3)
            except TimeoutError:
                client.fail("no first token")
            await client.close()  # the tab closes; the run goes on in the server

        async def sample_monitor() -> None:
            while True:
                active_samples.append((time.time(), monitor.active()))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample_monitor())
        await asyncio.gather(*(start(i, c) for i, c in enumerate(clients)))
        ramp_s = max(c.sent_at or started for c in clients) - started

        # -- until the Run table shows no active run (every run ended, one way or another)
        deadline = started + ramp_s + 5 * workload.ideal_seconds + END_MARGIN_S
        rows: list[tuple[str, float | None]] = []
        while time.time() < deadline:
            rows = await asyncio.to_thread(run_rows, db_path)
            if len(rows) >= n and not any(status in ACTIVE for status, _ in rows):
                break
            await asyncio.sleep(0.5)
        ended = time.time()
        cpu_end = streaming.process_cpu_seconds(server.process.pid)
        client_cpu = time.process_time() - client_cpu_start
        wait_end = runqueue_wait_seconds(server.process.pid)
        loop_end = main_thread_cpu_seconds(server.process.pid)
        timed_out = ended >= deadline
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
        watched = [c for c in clients if c.watched]
        await asyncio.gather(
            *(asyncio.wait_for(c.done.wait(), 10) for c in watched), return_exceptions=True
        )
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if monitor.ws is not None:
            await monitor.ws.close()
        if monitor.reader is not None:
            monitor.reader.cancel()
            await asyncio.gather(monitor.reader, return_exceptions=True)

    statuses: dict[str, int] = {}
    for status, _ in rows:
        statuses[status] = statuses.get(status, 0) + 1
    completed = statuses.get("completed", 0)
    durations = [s for status, s in rows if status == "completed" and s is not None]
    slowest_pace = workload.ideal_seconds / max(durations) if durations else 0.0
    latencies = [lat for c in watched for lat in c.latencies]
    ttft = [c.first_token_at - c.sent_at for c in clients if c.first_token_at and c.sent_at]
    accept = [c.replied_at - c.sent_at for c in clients if c.replied_at and c.sent_at]
    checks = [c.check(workload) for c in watched]
    integrity = {key: sum(c[key] for c in checks) for key in ("lost", "extra", "reordered")}
    integrity["bad_calls"] = sum(c["bad_calls"] for c in checks)
    errors = [c.error for c in clients if c.error]
    wall = ended - started
    cpu = (
        round((cpu_end - cpu_start) / wall, 3)
        if cpu_start is not None and cpu_end is not None and wall > 0
        else None
    )
    cpu_seconds = (
        round(cpu_end - cpu_start, 2) if cpu_start is not None and cpu_end is not None else None
    )
    p99 = streaming.ms(streaming.percentile(latencies, 99))
    targets = {
        f"all {n} runs completed": completed == n,
        f"full pace (slowest run >= {PACE_RATIO:g} of ideal)": slowest_pace >= PACE_RATIO,
        f"watched p99 < {P99_TARGET_MS:g} ms": p99 is not None and p99 < P99_TARGET_MS,
        f"server < {CPU_TARGET_CORES:g} core": cpu is not None and cpu < CPU_TARGET_CORES,
        "no start refused, no socket lost": not errors and not monitor.closed,
        "the monitor was open": not args.no_monitor,
        "watched tokens intact": not any(integrity.values()),
    }
    rates = [
        (len(c.indices) - 1) / (c.last_token_at - c.first_token_at)
        for c in watched
        if c.first_token_at and c.last_token_at and c.last_token_at > c.first_token_at
    ]
    return {
        "runs": n,
        "runs_completed": completed,
        "watched": len(watched),
        "watched_latency_ms": _spread(latencies),
        "ttft_ms": _spread(ttft),
        "server_cpu_cores": cpu,
        # Of which the event loop's thread (at 1.0 it is saturated whatever the machine).
        "server_loop_cpu_cores": (
            round((loop_end - loop_start) / wall, 3)
            if loop_start is not None and loop_end is not None and wall > 0
            else None
        ),
        # Less sensitive to a busy machine than cores: the server's CPU time for the step.
        "server_cpu_seconds": cpu_seconds,
        "server_cpu_ms_per_run": round(cpu_seconds * 1000 / n, 1) if cpu_seconds else None,
        # What the same CPU time would need if every run had kept full pace (a projection
        # for a busy machine; the monitor's share grows with the wall time, so it is high).
        "server_cpu_cores_if_full_pace": (
            round(cpu_seconds / (ramp_s + workload.ideal_seconds), 3) if cpu_seconds else None
        ),
        # The machine is shared: the client's own CPU and the load say how much was left.
        "client_cpu_cores": round(client_cpu / wall, 3) if wall > 0 else None,
        "loadavg_at_start": [round(x, 2) for x in loadavg_start],
        # Per wall second, how long the server's threads were runnable but not running
        # (threads that ended during the step are missed): near 0 on an idle machine.
        "server_runqueue_wait_per_s": (
            round((wait_end - wait_start) / wall, 3)
            if wait_start is not None and wait_end is not None and wall > 0
            else None
        ),
        "model_first_token_delay_s": workload.first_token_delay,
        "run_seconds": {
            "ideal": round(workload.ideal_seconds, 2),
            **_spread(durations, scale=1.0),
            "slowest_pace": round(slowest_pace, 3),
        },
        "run_statuses": statuses,
        "peak_active_runs_on_monitor": max((a for _, a in active_samples), default=0),
        "ramp": {
            "connect_s": round(connect_s, 2),
            "start_rate_planned_per_s": args.start_rate,
            "seconds": round(ramp_s, 2),
            "send_to_accepted_ms": _spread(accept),
        },
        "held_s": round(wall, 2),
        "timed_out": timed_out,
        "watched_integrity": integrity,
        "watched_tokens_per_s_per_stream_p50": round(streaming.percentile(rates, 50) or 0.0, 1),
        "monitor": {
            "frames": monitor.frames,
            "rows": monitor.rows,
            "bytes": monitor.bytes,
            "runs_seen": len(monitor.status),
            "closed_early": monitor.closed,
        },
        "errors": errors[:5],
        "error_count": len(errors),
        "targets": targets,
        "passed": all(targets.values()),
    }


def run_step(procs: harness.Processes, n: int, workload: Workload, args: argparse.Namespace):
    name = f"capacity-{n}"
    db_path = procs.workdir / f"{name}.sqlite3"
    env = procs.base_env(DATABASE_URL=harness.sqlite_url(db_path))
    harness.migrate(env)
    data = harness.setup_data(
        env,
        n,
        workload.delay,
        workload.tokens,
        first_token_delay=workload.first_token_delay,
        tools=("wait",),
    )
    if data["provider_settings"].get("reply_words") != workload.tokens:
        raise RuntimeError("the demo model's settings lack reply_words: cannot size the turns")
    server = procs.start_server(name, "zett_site.asgi:application", env)
    try:
        cookie = harness.login(server, data["user"], data["password"])
        staff_cookie = harness.login(server, data["staff"], data["password"])
        figures = asyncio.run(
            hold(server, db_path, cookie, staff_cookie, list(data["sessions"]), workload, args)
        )
    finally:
        procs.stop_server(server, timeout=30)
    figures["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    figures["server_log_tracebacks"] = procs.logs.get(name, {}).get("tracebacks", 0)
    return figures


def step_line(figures: dict[str, Any]) -> str:
    lat, ttft, run = figures["watched_latency_ms"], figures["ttft_ms"], figures["run_seconds"]
    return (
        f"runs={figures['runs']} completed={figures['runs_completed']} "
        f"(peak {figures['peak_active_runs_on_monitor']} active on the monitor) | watched "
        f"{figures['watched']}: p50={lat['p50']} p99={lat['p99']} max={lat['max']} ms | ttft "
        f"p50/p99 {ttft['p50']}/{ttft['p99']} ms (model waits "
        f"{figures['model_first_token_delay_s']:g} s) | run {run['p50']}/{run['max']} s "
        f"(ideal {run['ideal']}, slowest pace {run['slowest_pace']}) | server "
        f"{figures['server_cpu_cores']} cores (loop {figures['server_loop_cpu_cores']}) over "
        f"{figures['held_s']} s, "
        f"{figures['server_cpu_ms_per_run']} ms CPU/run (client "
        f"{figures['client_cpu_cores']}, load {figures['loadavg_at_start'][0]}, server waited "
        f"{figures['server_runqueue_wait_per_s']} s/s for a CPU) | ramp "
        f"{figures['ramp']['seconds']} s, errors {figures['error_count']} -> "
        f"{'PASS' if figures['passed'] else 'FAIL'}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=GOAL_RUNS, help="concurrent runs (1000)")
    parser.add_argument("--find-max", action="store_true", help="step N up; largest passing")
    parser.add_argument(
        "--steps",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=list(DEFAULT_STEPS),
        help="N per step with --find-max (250,500,750,1000)",
    )
    parser.add_argument("--watched", type=int, default=50, help="chats kept open (50)")
    parser.add_argument("--start-rate", type=float, default=100.0, help="messages per second")
    parser.add_argument("--turns", type=int, default=3, help="tool turns per run (3)")
    parser.add_argument("--first-token-delay", type=float, default=1.0, help="seconds (1)")
    parser.add_argument("--tokens", type=int, default=100, help="tokens per model call (100)")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per token (0.02)")
    parser.add_argument("--tool-seconds", type=float, default=2.0, help="wait tool (2)")
    parser.add_argument(
        "--no-monitor", action="store_true", help="diagnosis only: no monitor socket (fails)"
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure to PATH")
    args = parser.parse_args(argv)
    if args.runs < 1 or any(step < 1 for step in args.steps):
        parser.error("runs must be at least 1")
    if not 1 <= args.turns <= 99 or not 0 <= args.tool_seconds < 60:
        parser.error("--turns 1..99 and --tool-seconds below 60 (the demo's wait grammar)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    workload = Workload(
        args.turns, args.first_token_delay, args.tokens, args.delay, args.tool_seconds
    )
    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    command = " ".join(shlex.quote(part) for part in [sys.executable, *sys.argv])
    print(
        f"machine: nproc={machine['nproc']} python={machine['python']} "
        f"loadavg={machine['loadavg_at_start']} (the machine may be shared: figures vary)\n"
        f"command: {command}\n"
        f"workload: {workload.turns} turns of ({workload.first_token_delay:g} s to the first "
        f"token, {workload.tokens} tokens at {1 / workload.delay:g}/s, a "
        f"{workload.tool_seconds:g} s tool call), then the answer; ideal run "
        f"{workload.ideal_seconds:.1f} s; {args.watched} watched, monitor "
        f"{'CLOSED (diagnosis)' if args.no_monitor else 'open'}",
        flush=True,
    )
    steps = args.steps if args.find_max else [args.runs]
    results: dict[str, Any] = {"machine": machine, "command": command, "args": vars(args)}
    procs = harness.Processes()
    done: list[dict[str, Any]] = []
    best = 0
    try:
        for n in steps:
            print(f"  {n} runs ...", flush=True)
            figures = run_step(procs, n, workload, args)
            done.append(figures)
            print("   ", step_line(figures), flush=True)
            for name, ok in figures["targets"].items():
                print(f"      {'PASS' if ok else 'FAIL'}  {name}")
            if not figures["passed"]:
                break
            best = n
    except KeyboardInterrupt:
        print("bench: interrupted; stopping every process", file=sys.stderr)
        results["interrupted"] = True
    finally:
        procs.close()
        print(f"server logs: {procs.workdir}")
    if args.find_max:
        results.update(steps=done, largest_passing_runs=best)
        print(f"largest passing N: {best} (goal {GOAL_RUNS})")
        passed = best >= GOAL_RUNS
    else:
        results.update(done[0] if done else {"runs": args.runs})
        passed = bool(done and done[0]["passed"])
    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2, default=str))
        print(f"wrote {path}")
    return 0 if passed and not results.get("interrupted") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
