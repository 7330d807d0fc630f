"""Streaming benchmark: token latency, loss and throughput of live chat sockets, and capacity.

What it measures, all in one invocation (every server is a real Daphne subprocess):

1. Streaming, N concurrent chat clients (default 100), each in its own session, the demo model
   at 50 tokens/s each (delay 0.02), against ONE dashboard process (SQLite file, in-memory
   layer), and the same load against bench/bare_asgi.py (a bare Channels consumer streaming
   the same model in-process, one frame per delta). bench/latency_probe.py stamps every
   delta with its index and yield time; clients compute per-token latency (same clock) and
   check that no token is lost, repeated or reordered and that the final answer matches.
2. Capacity: ramp active runs (default 50, 100, 250, 500, 1000, 1500; stop at the first
   failing step) with one staff monitor socket open, a sample of chat clients measuring
   latency and the rest (in a separate client process) only counting tokens; the largest
   step with p99 < 100 ms and nothing lost is the process's capacity.
3. ``--redis``: the streaming measurement on PostgreSQL across TWO dashboard processes on the
   Redis channel layer, half the clients watching a session from the process that does NOT
   host its run, against one process on the in-memory layer on the same database.

    .venv/bin/python bench/streaming.py [--clients 100] [--redis] [--json PATH] [--quick]

Nothing here runs inside pytest. ``ZETT_BENCH_PROFILE_DIR=dir`` runs every server under
cProfile (see bench/_harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shlex
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
from bench.latency_probe import MARKER, OPEN  # noqa: E402

DEMO_DELAY = 0.02  # 50 tokens/s per stream
ANSWER_WORDS = 200
TARGET_RATIO = 0.8
TARGET_P99_MS = 50.0
CAPACITY_P99_MS = 100.0
CAPACITY_TARGET = 1000
RUN_TIMEOUT = 60.0  # one answer, start to finish, before the client gives up on it
CONNECT_CONCURRENCY = 32

_DELTA = re.compile(r'<span hx-swap-oob="beforeend:#answer-[^"]*">([^<]*)</span>')
_ANSWER = re.compile(r'data-testid="answer">(.*?)</div>', re.S)
_TERMINAL = re.compile(
    r'id="run-status"[^>]*data-status="(completed|failed|cancelled|interrupted)"'
)
_TAG = re.compile(r"<[^>]+>")
_TERMINAL_MARKS = tuple(
    f'data-status="{status}"' for status in ("completed", "failed", "cancelled", "interrupted")
)


# -- the workload --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """What every client sends and what the model will answer."""

    prompt: str
    reply_words: int  # passed to the demo model when the provider registry supports it
    expected_tokens: int  # deltas of one answer
    delay: float


def make_workload(quick: bool, delay: float) -> Workload:
    from agents.providers._streaming import split_words
    from agents.providers.demo import DemoModel
    from agents.providers.registry import DemoSettings
    from agents.runtime import ModelRequest, UserMessage

    supported = "reply_words" in DemoSettings.model_fields
    if quick:
        prompt, reply_words = "please stream a short answer", 0
    elif supported:
        prompt, reply_words = "please stream a long answer", ANSWER_WORDS
    else:
        # No reply_words in the registry: the demo echoes at most 200 characters of the
        # prompt, so one-letter words give the longest answer it can stream (~125 deltas).
        letters = "abcdefghjklmnopqrsuvwxyz"  # no digits or time words: no tool calls
        prompt, reply_words = " ".join(letters[i % len(letters)] for i in range(100)), 0
    model = DemoModel(delay=delay, reply_words=reply_words)
    answer = model.respond(ModelRequest(messages=(UserMessage(prompt),)))
    return Workload(prompt, reply_words, len(split_words(answer.content)), delay)


# -- one answer as a client sees it --------------------------------------------------------


@dataclass(eq=False)
class Answer:
    """One run from the client's side: what arrived, when, and in which order."""

    sent_at: float
    measure: bool
    window: tuple[float, float] | None = None  # only latencies received inside it count
    indices: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds, inside the window
    streamed: list[str] = field(default_factory=list)
    tokens: int = 0
    tokens_in_window: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    final: str | None = None
    status: str = ""
    error: str = ""
    finished_at: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def on_frame(self, frame: str, now: float) -> None:
        if self.measure:
            if "beforeend:#answer-" in frame:
                self._deltas(frame, now)
            if 'data-testid="answer"' in frame:
                match = _ANSWER.search(frame)
                if match:
                    self.final = unescape(_TAG.sub("", match.group(1)))
        elif OPEN in frame:
            count = frame.count(OPEN)
            self.tokens += count
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now
            if self.window and self.window[0] <= now <= self.window[1]:
                self.tokens_in_window += count
        if 'data-status="' in frame:
            for mark in _TERMINAL_MARKS:
                if mark in frame and _TERMINAL.search(frame):
                    self.status = mark.split('"')[1]
                    self.finished_at = now
                    self.done.set()
                    break
        if 'data-reply="rejected"' in frame or 'data-testid="frame-error"' in frame:
            self.error = _TAG.sub("", frame)[:200].strip() or "rejected"
            self.done.set()

    def _deltas(self, frame: str, now: float) -> None:
        inside = self.window is None or self.window[0] <= now <= self.window[1]
        for escaped in _DELTA.findall(frame):
            text = unescape(escaped)
            self.streamed.append(text)
            for index, stamp in MARKER.findall(text):
                self.indices.append(int(index))
                self.tokens += 1
                if inside:
                    self.latencies.append(now - float(stamp))
                    self.tokens_in_window += 1
                if self.first_token_at is None:
                    self.first_token_at = now
                self.last_token_at = now

    def check(self, expected: int) -> dict[str, int]:
        """Lost, reordered, duplicated and final-mismatch counts of this answer."""
        seen = set(self.indices)
        reordered = sum(1 for a, b in zip(self.indices, self.indices[1:], strict=False) if b <= a)
        lost = len(set(range(expected)) - seen)
        mismatch = 0
        if self.measure and not self.error:
            final = self.final or ""
            final_indices = [int(i) for i, _ in MARKER.findall(final)]
            if final_indices != list(range(expected)) or _norm(final) != _norm(
                "".join(self.streamed)
            ):
                mismatch = 1
        return {
            "lost": lost,
            "reordered": reordered,
            "duplicated": len(self.indices) - len(seen),
            "unexpected": len(seen - set(range(expected))),
            "final_mismatch": mismatch,
        }


def _norm(text: str) -> str:
    return " ".join(text.split())


class ChatClient:
    """One chat: a socket to watch (and one to send on, the same unless cross-process)."""

    def __init__(self, recv_ws: Any, send_ws: Any, *, bare: bool, measure: bool) -> None:
        self.recv_ws = recv_ws
        self.send_ws = send_ws
        self.bare = bare
        self.measure = measure
        self.current: Answer | None = None
        self.answers: list[Answer] = []
        self.ready = asyncio.Event()
        self.send_ready = asyncio.Event()
        self.readers: list[asyncio.Task[None]] = []
        self.closed = ""

    def start(self) -> None:
        self.readers.append(asyncio.create_task(self._read(self.recv_ws, primary=True)))
        if self.send_ws is not self.recv_ws:
            self.readers.append(asyncio.create_task(self._read(self.send_ws, primary=False)))
        else:
            self.send_ready = self.ready
        if self.bare:  # no snapshot on the bare socket
            self.ready.set()
            self.send_ready.set()

    async def _read(self, ws: Any, *, primary: bool) -> None:
        from websockets.exceptions import ConnectionClosed

        first = True
        try:
            async for frame in ws:
                now = time.time()
                if first:
                    first = False
                    (self.ready if primary else self.send_ready).set()
                    if not self.bare:
                        continue  # the snapshot
                answer = self.current
                if answer is None:
                    continue
                if primary:
                    answer.on_frame(frame, now)
                elif 'data-reply="rejected"' in frame or 'data-testid="frame-error"' in frame:
                    answer.on_frame(frame, now)
        except ConnectionClosed as exc:
            self.closed = f"closed {exc.rcvd.code if exc.rcvd else '?'}"
        finally:
            self.closed = self.closed or "closed"
            if self.current is not None and not self.current.done.is_set():
                self.current.error = self.current.error or self.closed
                self.current.done.set()

    async def run_once(
        self, workload: Workload, *, window: tuple[float, float] | None = None
    ) -> Answer:
        answer = Answer(sent_at=time.time(), measure=self.measure, window=window)
        self.current = answer
        self.answers.append(answer)
        if self.bare:
            body = {
                "type": "message",
                "text": workload.prompt,
                "delay": workload.delay,
                "reply_words": workload.reply_words,
            }
        else:
            body = {"type": "message", "text": workload.prompt}
        try:
            await self.send_ws.send(json.dumps(body))
            await asyncio.wait_for(answer.done.wait(), RUN_TIMEOUT)
        except TimeoutError:
            answer.error = answer.error or f"no end of the answer within {RUN_TIMEOUT}s"
        except Exception as exc:
            answer.error = answer.error or f"{type(exc).__name__}: {exc}"
        return answer

    async def close(self) -> None:
        for ws in {id(self.recv_ws): self.recv_ws, id(self.send_ws): self.send_ws}.values():
            try:
                await ws.close()
            except Exception:
                pass
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a client watches and where it sends."""

    recv_url: str
    recv_origin: str
    send_url: str
    send_origin: str
    cookie: str


async def open_clients(
    targets: list[Target], *, bare: bool, measure: bool, timeout: float = 60.0
) -> list[ChatClient]:
    """Open every client's sockets (bounded concurrency) and wait for their snapshots."""
    semaphore = asyncio.Semaphore(CONNECT_CONCURRENCY)
    clients: list[ChatClient | None] = [None] * len(targets)

    async def one(position: int, target: Target) -> None:
        async with semaphore:
            recv_ws = await harness.open_ws(
                target.recv_url, cookie=target.cookie, origin=target.recv_origin
            )
            send_ws = recv_ws
            if target.send_url != target.recv_url:
                send_ws = await harness.open_ws(
                    target.send_url, cookie=target.cookie, origin=target.send_origin
                )
            client = ChatClient(recv_ws, send_ws, bare=bare, measure=measure)
            clients[position] = client
            client.start()
            await asyncio.wait_for(client.ready.wait(), timeout)
            await asyncio.wait_for(client.send_ready.wait(), timeout)

    results = await asyncio.gather(
        *(one(i, t) for i, t in enumerate(targets)), return_exceptions=True
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    opened = [c for c in clients if c is not None]
    if failures:
        await asyncio.gather(*(c.close() for c in opened), return_exceptions=True)
        raise RuntimeError(f"{len(failures)} of {len(targets)} clients failed: {failures[0]!r}")
    return opened


# -- figures ------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def summarize(answers: list[Answer], expected: int, started: float) -> dict[str, Any]:
    latencies = [lat for a in answers for lat in a.latencies]
    checks = [a.check(expected) for a in answers]
    ends = [a.last_token_at for a in answers if a.last_token_at is not None]
    tokens = sum(a.tokens for a in answers)
    elapsed = (max(ends) - started) if ends else 0.0
    ttft = [a.first_token_at - a.sent_at for a in answers if a.first_token_at is not None]
    stream_rates = [
        (len(a.indices) - 1) / (a.last_token_at - a.first_token_at)
        for a in answers
        if a.first_token_at and a.last_token_at and a.last_token_at > a.first_token_at
    ]
    return {
        "answers": len(answers),
        "expected_tokens_per_answer": expected,
        "tokens": tokens,
        "elapsed_s": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed, 1) if elapsed else 0.0,
        "per_stream_tokens_per_s_p50": round(percentile(stream_rates, 50) or 0.0, 1),
        "latency_ms": {
            "p50": ms(percentile(latencies, 50)),
            "p90": ms(percentile(latencies, 90)),
            "p99": ms(percentile(latencies, 99)),
            "max": ms(max(latencies) if latencies else None),
            "samples": len(latencies),
        },
        "time_to_first_token_ms": {
            "p50": ms(percentile(ttft, 50)),
            "p99": ms(percentile(ttft, 99)),
            "max": ms(max(ttft) if ttft else None),
        },
        "lost": sum(c["lost"] for c in checks),
        "reordered": sum(c["reordered"] for c in checks),
        "duplicated": sum(c["duplicated"] for c in checks),
        "unexpected": sum(c["unexpected"] for c in checks),
        "final_mismatch": sum(c["final_mismatch"] for c in checks),
        "errors": [a.error for a in answers if a.error][:5],
        "error_count": sum(1 for a in answers if a.error),
        "not_completed": sum(1 for a in answers if a.status != "completed"),
    }


async def stream_round(
    targets: list[Target],
    workload: Workload,
    *,
    bare: bool,
    warmup: int = 0,
    keep: list[Answer] | None = None,
) -> dict[str, Any]:
    """Open one client per target, then start every answer at once; figures of the round."""
    if warmup:
        warm = await open_clients(targets[:warmup], bare=bare, measure=True)
        try:
            await asyncio.gather(*(c.run_once(workload) for c in warm))
        finally:
            await asyncio.gather(*(c.close() for c in warm), return_exceptions=True)
        targets = targets[warmup:]
    clients = await open_clients(targets, bare=bare, measure=True)
    try:
        started = time.time()
        answers = await asyncio.gather(*(c.run_once(workload) for c in clients))
        if keep is not None:
            keep.extend(answers)
        return summarize(list(answers), workload.expected_tokens, started)
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


# -- part 1: dashboard against bare ASGI ---------------------------------------------------


def chat_targets(server: harness.Server, cookie: str, sessions: list[str]) -> list[Target]:
    return [
        Target(
            f"{server.ws_url}/ws/sessions/{sid}/",
            server.origin,
            f"{server.ws_url}/ws/sessions/{sid}/",
            server.origin,
            cookie,
        )
        for sid in sessions
    ]


def bare_targets(server: harness.Server, count: int) -> list[Target]:
    url = f"{server.ws_url}/ws/bare/"
    return [Target(url, server.origin, url, server.origin, "") for _ in range(count)]


def dashboard_server(
    procs: harness.Processes, name: str, sessions: int, workload: Workload, **env: str
) -> tuple[harness.Server, dict[str, Any], dict[str, str]]:
    """A fresh SQLite database (unless env names one), migrated and populated, and its server."""
    env.setdefault("DATABASE_URL", harness.sqlite_url(procs.workdir / f"{name}.sqlite3"))
    server_env = procs.base_env(**env)
    harness.migrate(server_env)
    data = harness.setup_data(server_env, sessions, workload.delay, workload.reply_words)
    server = procs.start_server(name, dashboard_app(server_env), server_env)
    return server, data, server_env


WHATIF: list[str] = []  # --what-if: patched servers, labelled, never the product's figures


def dashboard_app(env: dict[str, str]) -> str:
    if WHATIF:
        env["ZETT_BENCH_WHATIF"] = ",".join(WHATIF)
        return harness.WHATIF_APP
    return "zett_site.asgi:application"


def part_streaming(procs: harness.Processes, args: argparse.Namespace, workload: Workload) -> dict:
    n, warm = args.clients, args.warmup
    bare_env = procs.base_env()
    bare_env.pop("DJANGO_SETTINGS_MODULE")  # bare_asgi configures its own minimal settings
    bare = procs.start_server("bare", "bench.bare_asgi:application", bare_env)
    dash, data, _ = dashboard_server(procs, "dashboard", n + warm, workload)
    cookie = harness.login(dash, data["user"], data["password"])
    bare_figures = asyncio.run(
        stream_round(bare_targets(bare, n + warm), workload, bare=True, warmup=warm)
    )
    procs.stop_server(bare)
    dash_figures = asyncio.run(
        stream_round(
            chat_targets(dash, cookie, data["sessions"]), workload, bare=False, warmup=warm
        )
    )
    procs.stop_server(dash)
    ratio = (
        dash_figures["tokens_per_s"] / bare_figures["tokens_per_s"]
        if bare_figures["tokens_per_s"]
        else 0.0
    )
    p99 = dash_figures["latency_ms"]["p99"]
    intact = all(
        dash_figures[key] == 0
        for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
    )
    return {
        "clients": n,
        "provider_settings": data["provider_settings"],
        "extensions": data["extensions"],
        "bare": bare_figures,
        "dashboard": dash_figures,
        "throughput_ratio": round(ratio, 3),
        "targets": {
            f"throughput >= {TARGET_RATIO}x bare": ratio >= TARGET_RATIO,
            f"p99 < {TARGET_P99_MS:g} ms": p99 is not None and p99 < TARGET_P99_MS,
            "zero lost or reordered": intact and dash_figures["error_count"] == 0,
        },
    }


# -- part 2: capacity ------------------------------------------------------------------------


def _ticks(start: float, stop: float, step: float = 0.25) -> list[float]:
    count = max(1, int((stop - start) / step))
    return [start + i * step for i in range(count)]


def active_counts(intervals: list[tuple[float, float]], ticks: list[float]) -> list[int]:
    """How many (sent, finished) intervals cover each tick."""
    return [sum(1 for begin, end in intervals if begin <= t < end) for t in ticks]


async def loop_client(
    client: ChatClient, workload: Workload, start: float, window: tuple[float, float]
) -> None:
    """Send, wait for the end of the answer, send again, until the window closes."""
    stop = window[1]
    await asyncio.sleep(max(0.0, start - time.time()))
    while time.time() < stop and not client.closed:
        answer = await client.run_once(workload, window=window)
        if answer.error:
            await asyncio.sleep(0.2)  # do not spin on a failing session


async def monitor_client(server: harness.Server, cookie: str, stop: asyncio.Event) -> dict:
    ws = await harness.open_ws(f"{server.ws_url}/ws/monitor/", cookie=cookie, origin=server.origin)
    frames = rows = finished = 0
    size = 0
    closed = ""

    async def read() -> None:
        nonlocal frames, rows, finished, size, closed
        try:
            async for frame in ws:
                frames += 1
                size += len(frame)
                rows += frame.count('data-testid="monitor-row"')
                finished += frame.count('hx-swap-oob="afterbegin:#recent-runs"')
        except Exception as exc:
            closed = repr(exc)

    reader = asyncio.create_task(read())
    try:
        await stop.wait()
    finally:
        await ws.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return {
        "frames": frames,
        "bytes": size,
        "row_updates": rows,
        "finished_rows": finished,
        "closed_early": closed,
    }


async def capacity_step(
    procs: harness.Processes,
    server: harness.Server,
    cookie: str,
    staff_cookie: str,
    sample_sessions: list[str],
    load_sessions: list[str],
    workload: Workload,
    args: argparse.Namespace,
) -> dict[str, Any]:
    total = len(sample_sessions) + len(load_sessions)
    worker = None
    if load_sessions:
        worker = await asyncio.create_subprocess_exec(
            harness.PYTHON,
            str(BENCH / "streaming.py"),
            "--load-worker",
            cwd=ROOT,
            env=procs.base_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
    stop_monitor = asyncio.Event()
    monitor_task = asyncio.create_task(monitor_client(server, staff_cookie, stop_monitor))
    samples: list[ChatClient] = []
    try:
        connect_started = time.time()
        if worker is not None:
            config = {
                "targets": [
                    [t.recv_url, t.recv_origin, t.send_url, t.send_origin, t.cookie]
                    for t in chat_targets(server, cookie, load_sessions)
                ],
                "workload": [
                    workload.prompt,
                    workload.reply_words,
                    workload.expected_tokens,
                    workload.delay,
                ],
            }
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write((json.dumps(config) + "\n").encode())
            await worker.stdin.drain()
        samples = await open_clients(
            chat_targets(server, cookie, sample_sessions), bare=False, measure=True
        )
        if worker is not None:
            line = await asyncio.wait_for(worker.stdout.readline(), 180)
            if not line.startswith(b"READY"):
                raise RuntimeError(f"load worker did not connect: {line[:300]!r}")
        connect_s = time.time() - connect_started
        start = time.time() + 0.5
        window = (start + args.ramp, start + args.ramp + args.window)
        if worker is not None:
            worker.stdin.write((json.dumps({"start": start, "window": window}) + "\n").encode())
            await worker.stdin.drain()
        # Spread first messages over one answer's length, so runs overlap in steady state.
        spread = workload.expected_tokens * workload.delay
        await asyncio.gather(
            *(loop_client(c, workload, start + random.uniform(0, spread), window) for c in samples)
        )
        load: dict[str, Any] = {"tokens_in_window": 0, "intervals": [], "errors": [], "runs": 0}
        if worker is not None:
            line = await asyncio.wait_for(worker.stdout.readline(), RUN_TIMEOUT + 60)
            load = json.loads(line or b"{}")
    finally:
        stop_monitor.set()
        for client in samples:
            await client.close()
        if worker is not None and worker.returncode is None:
            try:
                await asyncio.wait_for(worker.wait(), 30)
            except TimeoutError:
                worker.terminate()
                await worker.wait()
    monitor = await monitor_task
    answers = [a for c in samples for a in c.answers]
    figures = summarize(answers, workload.expected_tokens, window[0])
    ticks = _ticks(*window)
    intervals = [(a.sent_at, a.finished_at or a.sent_at) for a in answers]
    intervals += [tuple(i) for i in load.get("intervals", [])]
    active = active_counts(intervals, ticks)
    sample_in_window = sum(a.tokens_in_window for a in answers)
    delivered = (sample_in_window + load.get("tokens_in_window", 0)) / args.window
    p99 = figures["latency_ms"]["p99"]
    intact = all(
        figures[key] == 0
        for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
    )
    errors = figures["error_count"] + len(load.get("errors", []))
    passed = p99 is not None and p99 < CAPACITY_P99_MS and intact and errors == 0
    return {
        "runs": total,
        "sample_clients": len(sample_sessions),
        "connect_s": round(connect_s, 2),
        "active_runs_mean": round(sum(active) / len(active), 1),
        "active_runs_min": min(active),
        "delivered_tokens_per_s": round(delivered, 1),
        "ideal_tokens_per_s": round(total / workload.delay, 1),
        "answers_completed": figures["answers"]
        - figures["not_completed"]
        + load.get("completed", 0),
        "sample": figures,
        "load_errors": load.get("errors", [])[:5],
        "load_error_count": len(load.get("errors", [])),
        "monitor": monitor,
        "passed": passed,
    }


def part_capacity(procs: harness.Processes, args: argparse.Namespace, workload: Workload) -> dict:
    steps = args.capacity_steps
    sample = args.capacity_sample
    needed = sum(max(step, sample) for step in steps)
    server, data, _ = dashboard_server(procs, "capacity", needed, workload)
    cookie = harness.login(server, data["user"], data["password"])
    staff_cookie = harness.login(server, data["staff"], data["password"])
    sessions = list(data["sessions"])
    results = []
    best = 0
    try:
        for step in steps:
            chunk, sessions = sessions[: max(step, sample)], sessions[max(step, sample) :]
            sample_sessions = chunk[: min(sample, step)]
            load_sessions = chunk[min(sample, step) : step]
            print(f"  capacity step: {step} active runs ...", flush=True)
            figures = asyncio.run(
                capacity_step(
                    procs,
                    server,
                    cookie,
                    staff_cookie,
                    sample_sessions,
                    load_sessions,
                    workload,
                    args,
                )
            )
            results.append(figures)
            print("   ", _capacity_line(figures), flush=True)
            if not figures["passed"]:
                break
            best = step
            time.sleep(1.0)  # let the last runs' rows settle before the next step
    finally:
        procs.stop_server(server)
    return {
        "steps": results,
        "largest_passing_runs": best,
        "target": CAPACITY_TARGET,
        "passed": best >= CAPACITY_TARGET,
    }


def _capacity_line(step: dict[str, Any]) -> str:
    lat = step["sample"]["latency_ms"]
    return (
        f"runs={step['runs']} active(mean/min)={step['active_runs_mean']}/"
        f"{step['active_runs_min']} delivered={step['delivered_tokens_per_s']} tok/s "
        f"(ideal {step['ideal_tokens_per_s']}) p50={lat['p50']} p99={lat['p99']} "
        f"max={lat['max']} ms lost={step['sample']['lost']} "
        f"reordered={step['sample']['reordered']} errors="
        f"{step['sample']['error_count'] + step['load_error_count']} "
        f"monitor_frames={step['monitor']['frames']} -> "
        f"{'PASS' if step['passed'] else 'FAIL'}"
    )


async def load_worker_main() -> None:
    """Child process: open the load clients, run them when told, report counts as JSON."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    config = json.loads(await reader.readline())
    workload = Workload(*config["workload"])
    targets = [Target(*t) for t in config["targets"]]
    clients: list[ChatClient] = []
    try:
        clients = await open_clients(targets, bare=False, measure=False, timeout=120)
        print(f"READY {len(clients)}", flush=True)
        go = json.loads(await reader.readline())
        start, window = go["start"], tuple(go["window"])
        spread = workload.expected_tokens * workload.delay
        await asyncio.gather(
            *(loop_client(c, workload, start + random.uniform(0, spread), window) for c in clients)
        )
        answers = [a for c in clients for a in c.answers]
        report = {
            "tokens_in_window": sum(a.tokens_in_window for a in answers),
            "intervals": [[a.sent_at, a.finished_at or a.sent_at] for a in answers],
            "errors": [a.error for a in answers if a.error],
            "completed": sum(1 for a in answers if a.status == "completed"),
            "runs": len(answers),
        }
    except Exception as exc:
        report = {"errors": [f"load worker: {exc!r}"], "intervals": [], "tokens_in_window": 0}
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    print(json.dumps(report), flush=True)


# -- part 3: two processes on PostgreSQL and Redis -------------------------------------------


def redis_cleanup(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter("asgi*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


def part_redis(procs: harness.Processes, args: argparse.Namespace, workload: Workload) -> dict:
    n, warm = args.clients, args.warmup
    name = f"zett_bench_{os.getpid()}"
    db_url = harness.create_postgres_database(args.postgres_admin_url, name)
    procs.cleanups.append(lambda: harness.drop_postgres_database(args.postgres_admin_url, name))
    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    redis_cleanup(redis_url)
    procs.cleanups.append(lambda: redis_cleanup(redis_url))

    one, data, _ = dashboard_server(procs, "pg-memory", n + warm, workload, DATABASE_URL=db_url)
    cookie = harness.login(one, data["user"], data["password"])
    single = asyncio.run(
        stream_round(chat_targets(one, cookie, data["sessions"]), workload, bare=False, warmup=warm)
    )
    procs.stop_server(one)

    env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url}
    server_env = procs.base_env(**env)
    data = harness.setup_data(server_env, n + warm, workload.delay, workload.reply_words)
    a = procs.start_server("redis-a", dashboard_app(server_env), server_env)
    b = procs.start_server("redis-b", dashboard_app(server_env), server_env)
    try:
        cookies = {a.port: harness.login(a, data["user"], data["password"])}
        cookies[b.port] = harness.login(b, data["user"], data["password"])
        targets = []
        for i, sid in enumerate(data["sessions"]):
            # Even: watch and send on one process (alternating A, B). Odd: send on one
            # process, so the run is hosted there, and watch from the other.
            home = (a, b)[(i // 2) % 2]
            away = b if home is a else a
            watch = home if i % 2 == 0 else away
            path = f"/ws/sessions/{sid}/"
            targets.append(
                Target(
                    watch.ws_url + path,
                    watch.origin,
                    home.ws_url + path,
                    home.origin,
                    cookies[watch.port],
                )
            )
        two = asyncio.run(stream_round(targets, workload, bare=False, warmup=warm))
    finally:
        procs.stop_server(a)
        procs.stop_server(b)
    ratio = two["tokens_per_s"] / single["tokens_per_s"] if single["tokens_per_s"] else 0.0
    p99_one, p99_two = single["latency_ms"]["p99"], two["latency_ms"]["p99"]
    return {
        "clients": n,
        "cross_process_clients": sum(1 for i in range(n + warm) if i % 2 == 1 and i >= warm),
        "database": "postgresql (fresh database, dropped afterwards)",
        "redis_url": redis_url,
        "single_process_in_memory": single,
        "two_processes_redis": two,
        "throughput_ratio_redis_over_memory": round(ratio, 3),
        "p99_ratio_redis_over_memory": round(p99_two / p99_one, 2) if p99_one and p99_two else None,
        "targets": {
            f"p99 < {TARGET_P99_MS:g} ms (redis)": p99_two is not None and p99_two < TARGET_P99_MS,
            "zero lost or reordered (redis)": all(
                two[key] == 0
                for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
            )
            and two["error_count"] == 0,
        },
    }


# -- output ----------------------------------------------------------------------------------


def stream_line(label: str, figures: dict[str, Any]) -> str:
    lat, ttft = figures["latency_ms"], figures["time_to_first_token_ms"]
    return (
        f"  {label:<28} {figures['tokens_per_s']:>8} tok/s  p50 {lat['p50']} ms  "
        f"p99 {lat['p99']} ms  max {lat['max']} ms  ttft p50/p99 {ttft['p50']}/{ttft['p99']} ms  "
        f"lost {figures['lost']} reordered {figures['reordered']} dup {figures['duplicated']} "
        f"final-mismatch {figures['final_mismatch']} errors {figures['error_count']}  "
        f"({figures['answers']} answers x {figures['expected_tokens_per_answer']} tokens, "
        f"{figures['elapsed_s']} s, per-stream {figures['per_stream_tokens_per_s_p50']} tok/s)"
    )


def verdicts(targets: dict[str, bool]) -> str:
    return "\n".join(f"  {'PASS' if ok else 'FAIL'}  {name}" for name, ok in targets.items())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=None, help="concurrent chats (100)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up chats per server")
    parser.add_argument("--delay", type=float, default=DEMO_DELAY, help="demo seconds/token")
    parser.add_argument("--redis", action="store_true", help="also: 2 processes, PG + Redis")
    parser.add_argument("--no-capacity", action="store_true", help="skip the capacity ramp")
    parser.add_argument(
        "--capacity-steps",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="active runs per step (50,100,250,500,1000,1500)",
    )
    parser.add_argument("--capacity-sample", type=int, default=None, help="measuring clients")
    parser.add_argument("--ramp", type=float, default=None, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=None, help="seconds measured per step")
    parser.add_argument(
        "--postgres-admin-url",
        default=os.environ.get(
            "ZETT_BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--redis-db", type=int, default=9)
    parser.add_argument("--json", metavar="PATH", help="write every figure to PATH")
    parser.add_argument("--quick", action="store_true", help="N=10, short answers, 2 steps")
    parser.add_argument(
        "--what-if",
        type=lambda s: [x for x in s.split(",") if x],
        default=[],
        help="patch the dashboard servers with proposed fixes: " + ",".join(harness.WHATIF_CHOICES),
    )
    parser.add_argument("--load-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    args.clients = args.clients or (10 if quick else 100)
    args.warmup = args.warmup if args.warmup is not None else (2 if quick else 10)
    args.capacity_steps = args.capacity_steps or (
        [10, 20] if quick else [50, 100, 250, 500, 1000, 1500]
    )
    args.capacity_sample = args.capacity_sample or (5 if quick else 50)
    args.ramp = args.ramp if args.ramp is not None else (1.0 if quick else 4.0)
    args.window = args.window if args.window is not None else (3.0 if quick else 20.0)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.load_worker:
        asyncio.run(load_worker_main())
        return 0
    unknown = set(args.what_if) - set(harness.WHATIF_CHOICES)
    if unknown:
        sys.exit(f"--what-if: unknown {sorted(unknown)}; choose from {harness.WHATIF_CHOICES}")
    WHATIF[:] = args.what_if
    machine = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    command = " ".join(shlex.quote(part) for part in [sys.executable, *sys.argv])
    print(
        f"machine: nproc={machine['nproc']} python={machine['python']} {machine['platform']} "
        f"loadavg={machine['loadavg_at_start']} (the machine may be shared: figures vary)"
    )
    print(f"command: {command}")
    if WHATIF:
        print(
            f"WHAT-IF RUN: dashboard servers patched with {WHATIF} (bench/_harness.py); "
            "these are not the product's figures"
        )
    workload = make_workload(args.quick, args.delay)
    print(
        f"workload: {args.clients} concurrent chats, demo delay {workload.delay}s "
        f"({1 / workload.delay:g} tok/s each), {workload.expected_tokens} tokens per answer"
        + (
            " (the registry's DemoSettings has no reply_words: a 100-word echo prompt instead)"
            if not workload.reply_words and not args.quick
            else ""
        ),
        flush=True,
    )
    results: dict[str, Any] = {"machine": machine, "command": command, "args": vars(args)}
    procs = harness.Processes()
    failed = False
    try:
        print("\n[1] streaming: dashboard (1 Daphne, SQLite, in-memory layer) vs bare ASGI")
        streaming = part_streaming(procs, args, workload)
        results["streaming"] = streaming
        print(stream_line("bare ASGI", streaming["bare"]))
        print(stream_line("dashboard", streaming["dashboard"]))
        print(f"  throughput ratio dashboard/bare: {streaming['throughput_ratio']}")
        print(verdicts(streaming["targets"]), flush=True)
        failed |= not all(streaming["targets"].values())
        if not args.no_capacity:
            print(f"\n[2] capacity: monitor open, {args.capacity_sample} measuring clients")
            capacity = part_capacity(procs, args, workload)
            results["capacity"] = capacity
            print(
                f"  largest passing step: {capacity['largest_passing_runs']} active runs "
                f"(p99 < {CAPACITY_P99_MS:g} ms)"
            )
            print(verdicts({f">= {CAPACITY_TARGET} active runs": capacity["passed"]}), flush=True)
            failed |= not capacity["passed"]
        if args.redis:
            print("\n[3] --redis: 2 Daphne on PostgreSQL + Redis layer vs 1 on in-memory layer")
            redis_figures = part_redis(procs, args, workload)
            results["redis"] = redis_figures
            print(stream_line("1 process, in-memory", redis_figures["single_process_in_memory"]))
            print(stream_line("2 processes, redis", redis_figures["two_processes_redis"]))
            print(
                f"  ratios redis/in-memory: throughput "
                f"{redis_figures['throughput_ratio_redis_over_memory']}, p99 "
                f"{redis_figures['p99_ratio_redis_over_memory']} "
                f"({redis_figures['cross_process_clients']} clients watched from the other "
                "process)"
            )
            print(verdicts(redis_figures["targets"]), flush=True)
            failed |= not all(redis_figures["targets"].values())
    except KeyboardInterrupt:
        print("bench: interrupted; stopping every process", file=sys.stderr)
        results["interrupted"] = True
        failed = True
    finally:
        results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        results["what_if"] = WHATIF
        procs.close()
        results["server_logs"] = procs.logs
        noisy = {name: log["tracebacks"] for name, log in procs.logs.items() if log["tracebacks"]}
        print(f"\nserver logs: {procs.workdir}" + (f" (tracebacks: {noisy})" if noisy else ""))
        if args.json:
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results, indent=2, default=str))
            print(f"\nwrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
