"""Streaming benchmark: token latency, loss and throughput of live chat sockets, and capacity.

What it measures, all in one invocation (every server is a real Daphne subprocess):

1. Streaming, N concurrent chat clients (default 100), each in its own session, the demo model
   at 50 tokens/s each (delay 0.02), against ONE dashboard process (SQLite file, in-memory
   layer), and the same load against bench/bare_asgi.py (a bare Channels consumer streaming
   the same model in-process, one frame per delta). bench/latency_probe.py stamps every
   delta with its index and yield time; clients compute per-token latency (same clock) and
   check that no token is lost, repeated or reordered and that the final answer matches.
2. Capacity: the most runs one process keeps active with the monitor open. A step of N runs
   (default 250, 500, 1000, 1500, 2000; stop at the first failing step) gets a fresh Daphne
   and SQLite file, starts N runs through the chat socket (open, send, "accepted") at a
   bounded rate (--ramp-rate, 100/s), then closes every socket but S watched ones (default
   50): closing a tab never stops a run. Answers are long enough to outlast the step. After
   the ramp, one window (--window, 20 s) measures token latency at the watched chats, the
   staff monitor socket (frames, row age, the active count) and the Run table; a step
   passes with watched p99 < 100 ms, nothing lost or reordered, all N runs active
   throughout and the slowest watched stream at >= 80% of the model's pace (a saturated
   loop delivers tokens promptly but makes them slowly). Then the watched runs are
   cancelled (cancel -> monitor row freshness).
3. ``--redis``: the streaming measurement on PostgreSQL across TWO dashboard processes on the
   Redis channel layer, half the clients watching a session from the process that does NOT
   host its run, against one process on the in-memory layer on the same database.
4. ``--tracing``: the dashboard streaming round with tracing off and on (OTLP/HTTP to a local
   receiver that counts the spans it gets), ``--tracing-rounds`` pairs in alternating order,
   each on a fresh Daphne: throughput, latency and server CPU, and their ratios.
5. ``--burst``: N sockets (``--burst-sockets``, 200) x M messages (``--burst-messages``, 10):
   all sockets send at once, M waves; time to first token (``burst.ttft_ms.p99`` in --json)
   and exact counts (accepted, completed, tokens, Run rows). With ``--redis`` also on two
   Daphnes on PostgreSQL + Redis, half the sockets watching from the other process.

    .venv/bin/python bench/streaming.py [--clients 100] [--redis] [--json PATH] [--quick]
        [--no-streaming] [--no-capacity] [--capacity-steps 250,500] [--capacity-sample 50]
        [--tracing [--tracing-rounds 2]] [--burst [--burst-sockets 200] [--burst-messages 10]]

Nothing here runs inside pytest. ``ZETT_BENCH_PROFILE_DIR=dir`` runs every server under
cProfile (see bench/_harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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
# Two processes on Redis against one in-memory process (issue 12, goal 1).
TARGET_REDIS_RATIO = 0.9
TARGET_REDIS_P99_MS = 100.0
CAPACITY_P99_MS = 100.0
CAPACITY_TARGET = 1000
PACE_RATIO = 0.8  # capacity: the slowest watched stream keeps 80% of the model's pace
RUN_TIMEOUT = 60.0  # one answer, start to finish, before the client gives up on it
CONNECT_CONCURRENCY = 32

_DELTA = re.compile(r'<span hx-swap-oob="beforeend:#answer-[^"]*">([^<]*)</span>')
_ANSWER = re.compile(r'data-testid="answer">(.*?)</div>', re.S)
_TERMINAL = re.compile(
    r'id="run-status"[^>]*data-status="(completed|failed|cancelled|interrupted)"'
)
_TAG = re.compile(r"<[^>]+>")
_REPLY = re.compile(r'data-reply="(accepted|rejected)"')
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
    reply: str = ""  # the control reply to the message: accepted or rejected
    replied_at: float | None = None
    replied: asyncio.Event = field(default_factory=asyncio.Event)

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
        if 'data-reply="' in frame and not self.reply:
            match = _REPLY.search(frame)
            if match:
                self.reply, self.replied_at = match.group(1), now
                self.replied.set()
        if 'data-reply="rejected"' in frame or 'data-testid="frame-error"' in frame:
            self.error = _TAG.sub("", frame)[:200].strip() or "rejected"
            self.done.set()
            self.replied.set()

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
                elif 'data-reply="' in frame or 'data-testid="frame-error"' in frame:
                    answer.on_frame(frame, now)  # the reply comes on the socket that sent
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
#
# A dashboard has many runs active and few people watching each. Every step starts N runs
# through the real chat socket path (open, snapshot, send, "accepted"), then closes the socket
# of all but S watched sessions: the runs go on in the server (closing a tab never stops a
# run). One staff monitor socket is open for the whole step. Each step has its own Daphne and
# SQLite file, so steps never accumulate runs.

TERMINAL_STATUSES = ("completed", "failed", "cancelled", "interrupted")
# Run starts in flight at once. A start waits behind the others on the server's one ORM
# thread, and Daphne drops a handshake not accepted within 5 s: more in flight than the
# server starts per second or two would only turn queueing into refused sockets.
RAMP_IN_FLIGHT = 16
RAMP_RATE_FLOOR = 15.0  # starts/s the answer length assumes at worst (measured: 20-40/s)
SETTLE_TIMEOUT = 60.0  # after the ramp: every run reported running, or the step fails
CANCEL_TIMEOUT = 20.0
RUN_MARGIN_S = 30.0  # answers outlast ramp + settle + window by at least this much

_MONITOR_ROW = re.compile(
    r'<tr id="run-[^"]*" data-testid="monitor-row" data-request-id="([^"]+)"[^>]*? '
    r'data-status="([^"]+)"[^>]*>(.*?)</tr>',
    re.S,
)
_ROW_SESSION = re.compile(r'href="[^"]*/sessions/([^/"]+)/"')
_ROW_ELAPSED = re.compile(r'data-started-at="([0-9.]+)">\s*([0-9.]+) s<')


@dataclass(eq=False)
class MonitorWatch:
    """The staff monitor socket: every row it receives, and the runs it shows as active.

    The monitor never reflects token progress: text deltas do not mark a run's row dirty
    (RunManager._handle returns before ``hosted.dirty``) and ``output_tokens`` changes only
    when a model call completes. So instead of "token yield -> row showing it" this records
    what the rows do carry: the status of every run (-> the active count), each frame's
    arrival (-> inter-arrival), each active row's age on arrival (receipt minus the moment
    the server built it, ``data-started-at`` + the elapsed seconds it shows, +-0.05 s from
    the one-decimal rendering), and when a session's row first shows a terminal status.
    """

    status: dict[str, str] = field(default_factory=dict)  # request id -> last status shown
    session_of: dict[str, str] = field(default_factory=dict)  # request id -> session id
    terminal_at: dict[str, float] = field(default_factory=dict)  # session id -> first seen
    frame_times: list[float] = field(default_factory=list)
    row_ages: list[tuple[float, float]] = field(default_factory=list)  # (received, age s)
    rows: int = 0
    bytes: int = 0
    closed: str = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, condition: Any) -> None:
        """Return once condition() holds, checked after every frame."""
        while not condition():
            self.changed.clear()
            await self.changed.wait()

    def on_frame(self, frame: str, now: float) -> None:
        self.changed.set()
        self.frame_times.append(now)
        self.bytes += len(frame)
        for request_id, status, body in _MONITOR_ROW.findall(frame):
            self.rows += 1
            self.status[request_id] = status
            session = _ROW_SESSION.search(body)
            if session:
                self.session_of[request_id] = session.group(1)
                if status in TERMINAL_STATUSES:
                    self.terminal_at[session.group(1)] = now
            shown = _ROW_ELAPSED.search(body)
            if shown and status not in TERMINAL_STATUSES:
                built = float(shown.group(1)) + float(shown.group(2))
                self.row_ages.append((now, now - built))

    def active(self, *, running_only: bool = False) -> int:
        wanted = ("running", "waiting") if running_only else ("queued", "running", "waiting")
        return sum(1 for status in self.status.values() if status in wanted)


async def open_monitor(server: harness.Server, cookie: str) -> tuple[Any, MonitorWatch, Any]:
    ws = await harness.open_ws(f"{server.ws_url}/ws/monitor/", cookie=cookie, origin=server.origin)
    watch = MonitorWatch()

    async def read() -> None:
        try:
            async for frame in ws:
                watch.on_frame(frame, time.time())
        except Exception as exc:
            watch.closed = repr(exc)
        watch.closed = watch.closed or "closed"
        watch.changed.set()

    return ws, watch, asyncio.create_task(read())


@dataclass(eq=False)
class Started:
    """One run start as the ramp saw it."""

    session_id: str
    watched: bool
    sent_at: float = 0.0
    replied_at: float | None = None
    error: str = ""
    client: ChatClient | None = None
    answer: Answer | None = None


async def start_run(
    server: harness.Server, cookie: str, started: Started, workload: Workload
) -> None:
    """Open the chat socket, wait for its snapshot, send, wait for the reply; close it
    unless the session is watched (then its reader keeps every frame for the measurement)."""
    url = f"{server.ws_url}/ws/sessions/{started.session_id}/"
    body = json.dumps({"type": "message", "text": workload.prompt})
    ws = None
    try:
        ws = await harness.open_ws(url, cookie=cookie, origin=server.origin)
        if started.watched:
            client = ChatClient(ws, ws, bare=False, measure=True)
            started.client = client
            client.start()
            await asyncio.wait_for(client.ready.wait(), RUN_TIMEOUT)
            # No window yet: latencies count only once the measurement window is set.
            answer = Answer(sent_at=time.time(), measure=True, window=(float("inf"),) * 2)
            client.current = answer
            client.answers.append(answer)
            started.answer = answer
            started.sent_at = answer.sent_at
            await ws.send(body)
            await asyncio.wait_for(answer.replied.wait(), RUN_TIMEOUT)
            started.replied_at = answer.replied_at
            if answer.reply != "accepted":
                started.error = answer.error or f"reply {answer.reply or 'missing'}"
            return
        await asyncio.wait_for(ws.recv(), RUN_TIMEOUT)  # the snapshot
        started.sent_at = time.time()
        await ws.send(body)
        while True:
            frame = await asyncio.wait_for(ws.recv(), RUN_TIMEOUT)
            reply = _REPLY.search(frame)
            if reply:
                started.replied_at = time.time()
                if reply.group(1) != "accepted":
                    started.error = _TAG.sub("", frame)[:200].strip()
                break
            if 'data-testid="frame-error"' in frame:
                started.error = _TAG.sub("", frame)[:200].strip()
                break
    except Exception as exc:
        started.error = started.error or f"{type(exc).__name__}: {exc}"
    finally:
        if ws is not None and not started.watched:
            try:
                await ws.close()  # the tab closes; the run goes on in the server
            except Exception:
                pass


def capacity_workload(steps: int, args: argparse.Namespace) -> Workload:
    """A prompt whose answer outlasts the step: a ramp at the slowest start rate expected,
    the window and a margin, at the demo's pace."""
    ramp = steps / min(args.ramp_rate, RAMP_RATE_FLOOR)
    seconds = ramp + args.window + RUN_MARGIN_S
    words = min(10_000, int(seconds / args.delay) + 1)
    return Workload("please stream a long answer", words, words, args.delay)


def run_table_counts(path: Path) -> dict[str, int]:
    """Runs by status straight from the step's SQLite file (read-only; WAL lets it read)."""
    import sqlite3

    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        rows = connection.execute("SELECT status, COUNT(*) FROM agents_run GROUP BY status")
        return {status: count for status, count in rows}
    finally:
        connection.close()


def process_cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _spread(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": ms(percentile(values, 50)),
        "p99": ms(percentile(values, 99)),
        "max": ms(max(values) if values else None),
        "samples": len(values),
    }


async def capacity_step(
    server: harness.Server,
    db_path: Path,
    cookie: str,
    staff_cookie: str,
    sessions: list[str],
    workload: Workload,
    args: argparse.Namespace,
) -> dict[str, Any]:
    n = len(sessions)
    sample = min(args.capacity_sample, n)
    watched_at = {i * n // sample for i in range(sample)}  # spread over the whole ramp
    starts = [Started(sid, i in watched_at) for i, sid in enumerate(sessions)]
    monitor_ws, monitor, monitor_reader = await open_monitor(server, staff_cookie)
    watched = [s for s in starts if s.watched]
    try:
        # -- ramp: N run starts at a bounded rate, outside the measurement -------------
        in_flight = asyncio.Semaphore(RAMP_IN_FLIGHT)
        ramp_started = time.time()

        async def paced(position: int, started: Started) -> None:
            await asyncio.sleep(max(0.0, ramp_started + position / args.ramp_rate - time.time()))
            async with in_flight:
                await start_run(server, cookie, started, workload)

        await asyncio.gather(*(paced(i, s) for i, s in enumerate(starts)))
        ramp_s = time.time() - ramp_started
        ramp_errors = [s.error for s in starts if s.error]
        accept = [s.replied_at - s.sent_at for s in starts if s.replied_at is not None]

        # -- settle: every run reported running at the monitor --------------------------
        try:
            await asyncio.wait_for(
                monitor.until(lambda: monitor.closed or monitor.active(running_only=True) >= n),
                SETTLE_TIMEOUT,
            )
        except TimeoutError:
            pass  # the window shows how many are active; fewer than N fails the step
        await asyncio.sleep(0.5)  # the last rows' writes and frames drain
        settle_s = time.time() - ramp_started - ramp_s

        # -- window: latency at the watched chats, the monitor, the active count --------
        start = time.time()
        window = (start, start + args.window)
        for s in watched:
            if s.answer is not None:
                s.answer.window = window
        table_start = await asyncio.to_thread(run_table_counts, db_path)
        cpu_start, client_cpu_start = process_cpu_seconds(server.process.pid), time.process_time()
        active_samples: list[int] = []
        while time.time() < window[1]:
            active_samples.append(monitor.active())
            await asyncio.sleep(0.25)
        active_samples.append(monitor.active())
        watched_closed = [s.session_id for s in watched if s.client is None or s.client.closed]
        cpu_end, client_cpu_end = process_cpu_seconds(server.process.pid), time.process_time()
        table_end = await asyncio.to_thread(run_table_counts, db_path)
        frames_in = [t for t in monitor.frame_times if window[0] <= t <= window[1]]
        gaps = [b - a for a, b in zip(frames_in, frames_in[1:], strict=False)]
        ages_in = [age for at, age in monitor.row_ages if window[0] <= at <= window[1]]
        ages_ramp = [age for at, age in monitor.row_ages if at < window[0]]

        # -- after the window: cancel the watched runs (the rest still stream) ----------
        cancel_sent: dict[str, float] = {}
        for s in watched:
            if s.answer is not None and s.answer.done.is_set():
                continue  # ended on its own: nothing to cancel
            if s.client is not None and not s.client.closed and not s.error:
                cancel_sent[s.session_id] = time.time()
                try:
                    await s.client.send_ws.send(json.dumps({"type": "cancel"}))
                except Exception as exc:
                    s.error = f"cancel: {exc!r}"

        async def cancelled_everywhere() -> None:
            await asyncio.gather(
                *(s.answer.done.wait() for s in watched if s.session_id in cancel_sent)
            )
            await monitor.until(
                lambda: all(
                    monitor.terminal_at.get(sid, 0.0) >= t for sid, t in cancel_sent.items()
                )
            )

        try:
            await asyncio.wait_for(cancelled_everywhere(), CANCEL_TIMEOUT)
        except TimeoutError:
            pass  # the figures count only the cancellations seen
        to_monitor = [
            monitor.terminal_at[sid] - sent
            for sid, sent in cancel_sent.items()
            if monitor.terminal_at.get(sid, 0.0) >= sent
        ]
        to_chat = [
            s.answer.finished_at - cancel_sent[s.session_id]
            for s in watched
            if s.session_id in cancel_sent and s.answer and s.answer.finished_at
        ]
    finally:
        for s in watched:
            if s.client is not None:
                await s.client.close()
        await monitor_ws.close()
        monitor_reader.cancel()
        await asyncio.gather(monitor_reader, return_exceptions=True)

    answers = [s.answer for s in watched if s.answer is not None]
    latencies = [lat for a in answers for lat in a.latencies]
    checks = [_prefix_check(a) for a in answers]
    # A run that ended inside the window is a run that was not active: a failure.
    ended_in_window = sum(
        1 for a in answers if a.finished_at is not None and a.finished_at <= window[1]
    )
    active_table = [
        sum(t.get(s, 0) for s in ("queued", "running", "waiting")) for t in (table_start, table_end)
    ]
    rates = [a.tokens_in_window / args.window for a in answers]
    p99 = ms(percentile(latencies, 99))
    # Latency alone misses a saturated loop: the model's sleeps return late, so tokens leave
    # slowly but promptly. A step must also keep the runs' own pace.
    pace = min(rates) * workload.delay if rates else 0.0
    intact = all(sum(c[key] for c in checks) == 0 for key in ("lost", "reordered", "duplicated"))
    all_active = (
        min(active_samples) == n
        and max(active_samples) == n
        and active_table == [n, n]
        and ended_in_window == 0
        and not watched_closed
    )
    keeps_pace = pace >= PACE_RATIO
    cpu = (
        round((cpu_end - cpu_start) / args.window * 100, 1)
        if cpu_start is not None and cpu_end is not None
        else None
    )
    passed = (
        p99 is not None
        and p99 < CAPACITY_P99_MS
        and intact
        and all_active
        and keeps_pace
        and not ramp_errors
    )
    return {
        "runs": n,
        "watched": len(watched),
        "reply_words": workload.reply_words,
        "loadavg_at_start": args.step_loadavg,
        "ramp": {
            "rate_planned_per_s": args.ramp_rate,
            "seconds": round(ramp_s, 2),
            "rate_achieved_per_s": round(n / ramp_s, 1) if ramp_s else None,
            "send_to_accepted_ms": _spread(accept),
            "errors": ramp_errors[:5],
            "error_count": len(ramp_errors),
            "settle_s": round(settle_s, 2),
        },
        "window_s": args.window,
        "watched_latency_ms": {
            "p50": ms(percentile(latencies, 50)),
            "p90": ms(percentile(latencies, 90)),
            "p99": p99,
            "max": ms(max(latencies) if latencies else None),
            "samples": len(latencies),
        },
        "watched_tokens_per_s_per_stream": {
            "mean": round(sum(rates) / len(rates), 1) if rates else None,
            "min": round(min(rates), 1) if rates else None,
            "ideal": round(1 / workload.delay, 1),
            "slowest_over_ideal": round(pace, 3),
            "keeps_pace": keeps_pace,
        },
        "watched_integrity": {
            key: sum(c[key] for c in checks) for key in ("lost", "reordered", "duplicated")
        },
        "watched_ended_in_window": ended_in_window,
        "watched_sockets_closed_in_window": len(watched_closed),
        "active_runs": {
            "monitor_min": min(active_samples),
            "monitor_max": max(active_samples),
            "run_table_at_window_start": table_start,
            "run_table_at_window_end": table_end,
            "all_active": all_active,
        },
        "monitor": {
            "frames_in_window": len(frames_in),
            "rows_total": monitor.rows,
            "bytes_total": monitor.bytes,
            "frame_gap_in_window_ms": _spread(gaps),
            "row_age_in_window_ms": _spread(ages_in),
            "row_age_during_ramp_ms": _spread(ages_ramp),
            "cancel_to_monitor_row_ms": _spread(to_monitor),
            "cancel_to_chat_status_ms": _spread(to_chat),
            "closed_early": monitor.closed if monitor.closed != "closed" else "",
        },
        "server_cpu_percent_in_window": cpu,
        "client_cpu_percent_in_window": round(
            (client_cpu_end - client_cpu_start) / args.window * 100, 1
        ),
        "passed": passed,
    }


def _prefix_check(answer: Answer) -> dict[str, int]:
    """A run still streaming has sent tokens 0..k: any index missing below the highest one
    received is lost, any step back is reordered, any repeat duplicated."""
    seen = set(answer.indices)
    top = max(seen) if seen else -1
    return {
        "lost": len(set(range(top + 1)) - seen),
        "reordered": sum(
            1 for a, b in zip(answer.indices, answer.indices[1:], strict=False) if b <= a
        ),
        "duplicated": len(answer.indices) - len(seen),
    }


def part_capacity(procs: harness.Processes, args: argparse.Namespace) -> dict:
    results = []
    best = 0
    for step in args.capacity_steps:
        workload = capacity_workload(step, args)
        name = f"capacity-{step}"
        args.step_loadavg = [round(x, 2) for x in os.getloadavg()]
        print(
            f"  step {step} runs ({min(args.capacity_sample, step)} watched, "
            f"{workload.reply_words}-word answers, loadavg {args.step_loadavg}) ...",
            flush=True,
        )
        server, data, _ = dashboard_server(procs, name, step, workload)
        try:
            cookie = harness.login(server, data["user"], data["password"])
            staff_cookie = harness.login(server, data["staff"], data["password"])
            figures = asyncio.run(
                capacity_step(
                    server,
                    procs.workdir / f"{name}.sqlite3",
                    cookie,
                    staff_cookie,
                    list(data["sessions"]),
                    workload,
                    args,
                )
            )
        finally:
            # Runs are still active: give their shutdown time, so a profile gets written.
            procs.stop_server(server, timeout=60)
        results.append(figures)
        print("   ", _capacity_line(figures), flush=True)
        if not figures["passed"]:
            break
        best = step
    return {
        "steps": results,
        "largest_passing_runs": best,
        "target": CAPACITY_TARGET,
        "passed": best >= CAPACITY_TARGET,
    }


def _capacity_line(step: dict[str, Any]) -> str:
    lat, ramp, act = step["watched_latency_ms"], step["ramp"], step["active_runs"]
    mon, integrity = step["monitor"], step["watched_integrity"]
    return (
        f"runs={step['runs']} ramp {ramp['seconds']} s ({ramp['rate_achieved_per_s']}/s, "
        f"accept p99 {ramp['send_to_accepted_ms']['p99']} ms, errors {ramp['error_count']}) "
        f"settle {ramp['settle_s']} s | active monitor {act['monitor_min']}..{act['monitor_max']}"
        f" table {act['run_table_at_window_start']}->{act['run_table_at_window_end']} | "
        f"watched {step['watched']}: p50={lat['p50']} p99={lat['p99']} max={lat['max']} ms, "
        f"{step['watched_tokens_per_s_per_stream']['mean']} tok/s/stream (slowest "
        f"{step['watched_tokens_per_s_per_stream']['min']}), lost "
        f"{integrity['lost']} reordered {integrity['reordered']} dup {integrity['duplicated']} | "
        f"monitor: {mon['frames_in_window']} frames in window, row age p99 "
        f"{mon['row_age_in_window_ms']['p99']} ms (ramp {mon['row_age_during_ramp_ms']['p99']}), "
        f"cancel->row p50/p99 {mon['cancel_to_monitor_row_ms']['p50']}/"
        f"{mon['cancel_to_monitor_row_ms']['p99']} ms | server CPU "
        f"{step['server_cpu_percent_in_window']}% client CPU "
        f"{step['client_cpu_percent_in_window']}% -> {'PASS' if step['passed'] else 'FAIL'}"
    )


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


def two_process_targets(a: harness.Server, b: harness.Server, data: dict[str, Any]) -> list[Target]:
    """Half the sessions watched from the process that hosts their runs, half from the other."""
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
    return targets


def redis_databases(procs: harness.Processes, args: argparse.Namespace, tag: str) -> dict[str, str]:
    """A fresh PostgreSQL database and a clean Redis db (both cleaned up at the end)."""
    name = f"zett_bench_{tag}{os.getpid()}"
    db_url = harness.create_postgres_database(args.postgres_admin_url, name)
    procs.cleanups.append(lambda: harness.drop_postgres_database(args.postgres_admin_url, name))
    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    redis_cleanup(redis_url)
    procs.cleanups.append(lambda: redis_cleanup(redis_url))
    return {"DATABASE_URL": db_url, "REDIS_URL": redis_url}


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
        targets = two_process_targets(a, b, data)
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
            f"throughput >= {TARGET_REDIS_RATIO}x one process (redis)": ratio >= TARGET_REDIS_RATIO,
            f"p99 < {TARGET_REDIS_P99_MS:g} ms (redis)": (
                p99_two is not None and p99_two < TARGET_REDIS_P99_MS
            ),
            "zero lost or reordered (redis)": all(
                two[key] == 0
                for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
            )
            and two["error_count"] == 0,
        },
    }


# -- part 5: --burst, many run starts at once ------------------------------------------------
#
# N sockets, one session each, all open; then M waves: every socket sends a message at the
# same moment and waits for its answer. Each wave is N run starts in a burst, so what it
# measures is the start path (message -> accepted -> run row -> model -> first token) under
# load, and that nothing is dropped: every count must come out exact. Answers are short (the
# --quick prompt) since only their start and their completeness matter here.

BURST_TTFT_P99_MS = 500.0  # one process
BURST_TTFT_P99_MS_REDIS = 1000.0  # two processes, PostgreSQL and Redis


async def burst_waves(
    targets: list[Target], workload: Workload, messages: int, warmup: int
) -> tuple[list[Answer], float]:
    if warmup:
        warm = await open_clients(targets[:warmup], bare=False, measure=True)
        try:
            await asyncio.gather(*(c.run_once(workload) for c in warm))
        finally:
            await asyncio.gather(*(c.close() for c in warm), return_exceptions=True)
    clients = await open_clients(targets[warmup:], bare=False, measure=True)
    answers: list[Answer] = []
    try:
        started = time.time()
        for _ in range(messages):
            answers += await asyncio.gather(*(c.run_once(workload) for c in clients))
        return answers, time.time() - started
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def postgres_run_counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, connect_timeout=5) as connection:
        rows = connection.execute("SELECT status, COUNT(*) FROM agents_run GROUP BY status")
        return {status: count for status, count in rows}


def burst_figures(
    answers: list[Answer],
    elapsed: float,
    workload: Workload,
    runs: dict[str, int],
    *,
    sockets: int,
    messages: int,
    warmup: int,
) -> dict[str, Any]:
    expected_answers = sockets * messages
    ttft = [a.first_token_at - a.sent_at for a in answers if a.first_token_at is not None]
    replies = [a.replied_at - a.sent_at for a in answers if a.replied_at is not None]
    checks = [a.check(workload.expected_tokens) for a in answers]
    counts = {
        "answers": len(answers),
        "accepted": sum(1 for a in answers if a.reply == "accepted"),
        "completed": sum(1 for a in answers if a.status == "completed"),
        "tokens": sum(len(a.indices) for a in answers),
        "runs_completed_in_db": runs.get("completed", 0) - warmup,
        "runs_not_completed_in_db": sum(n for status, n in runs.items() if status != "completed"),
    }
    exact = {
        "answers": expected_answers,
        "accepted": expected_answers,
        "completed": expected_answers,
        "tokens": expected_answers * workload.expected_tokens,
        "runs_completed_in_db": expected_answers,
        "runs_not_completed_in_db": 0,
    }
    damage = {
        key: sum(c[key] for c in checks)
        for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
    }
    return {
        "sockets": sockets,
        "messages": messages,
        "elapsed_s": round(elapsed, 3),
        "runs_per_s": round(len(answers) / elapsed, 1) if elapsed else 0.0,
        "ttft_ms": {
            "p50": ms(percentile(ttft, 50)),
            "p90": ms(percentile(ttft, 90)),
            "p99": ms(percentile(ttft, 99)),
            "max": ms(max(ttft) if ttft else None),
            "samples": len(ttft),
        },
        "reply_ms": {"p50": ms(percentile(replies, 50)), "p99": ms(percentile(replies, 99))},
        "ttft_p99_ms_by_wave": [
            ms(
                percentile(
                    [
                        a.first_token_at - a.sent_at
                        for a in answers[wave * sockets : (wave + 1) * sockets]
                        if a.first_token_at is not None
                    ],
                    99,
                )
            )
            for wave in range(messages)
        ],
        "counts": counts,
        "expected": exact,
        "exact": counts == exact and not any(damage.values()),
        **damage,
        "errors": [a.error for a in answers if a.error][:5],
        "error_count": sum(1 for a in answers if a.error),
    }


def part_burst(procs: harness.Processes, args: argparse.Namespace) -> dict:
    workload = make_workload(True, args.delay)  # short answers: the start is what is measured
    n, m, warm = args.burst_sockets, args.burst_messages, args.warmup
    path = procs.workdir / "burst.sqlite3"
    server, data, _ = dashboard_server(
        procs, "burst", n + warm, workload, DATABASE_URL=harness.sqlite_url(path)
    )
    try:
        cookie = harness.login(server, data["user"], data["password"])
        targets = chat_targets(server, cookie, data["sessions"])
        answers, elapsed = asyncio.run(burst_waves(targets, workload, m, warm))
    finally:
        procs.stop_server(server)
    one = burst_figures(
        answers, elapsed, workload, run_table_counts(path), sockets=n, messages=m, warmup=warm
    )
    result: dict[str, Any] = {"one_process_sqlite": one, **one}
    targets_met = {
        f"ttft p99 < {BURST_TTFT_P99_MS:g} ms": (one["ttft_ms"]["p99"] or 1e9) < BURST_TTFT_P99_MS,
        "every count exact": one["exact"],
    }
    if args.redis:
        env = redis_databases(procs, args, "burst_")
        server_env = procs.base_env(**env)
        harness.migrate(server_env)
        data = harness.setup_data(server_env, n + warm, workload.delay, workload.reply_words)
        a = procs.start_server("burst-redis-a", dashboard_app(server_env), server_env)
        b = procs.start_server("burst-redis-b", dashboard_app(server_env), server_env)
        try:
            targets = two_process_targets(a, b, data)
            answers, elapsed = asyncio.run(burst_waves(targets, workload, m, warm))
        finally:
            procs.stop_server(a)
            procs.stop_server(b)
        two = burst_figures(
            answers,
            elapsed,
            workload,
            postgres_run_counts(env["DATABASE_URL"]),
            sockets=n,
            messages=m,
            warmup=warm,
        )
        result["two_processes_redis"] = two
        targets_met[f"ttft p99 < {BURST_TTFT_P99_MS_REDIS:g} ms (redis)"] = (
            two["ttft_ms"]["p99"] or 1e9
        ) < BURST_TTFT_P99_MS_REDIS
        targets_met["every count exact (redis)"] = two["exact"]
    result["targets"] = targets_met
    return result


def burst_line(label: str, figures: dict[str, Any]) -> str:
    ttft, reply, counts = figures["ttft_ms"], figures["reply_ms"], figures["counts"]
    return (
        f"  {label:<22} {figures['sockets']} sockets x {figures['messages']} messages: "
        f"ttft p50/p90/p99/max {ttft['p50']}/{ttft['p90']}/{ttft['p99']}/{ttft['max']} ms, "
        f"reply p50/p99 {reply['p50']}/{reply['p99']} ms, {figures['runs_per_s']} runs/s; "
        f"accepted {counts['accepted']} completed {counts['completed']} "
        f"db-completed {counts['runs_completed_in_db']} tokens {counts['tokens']} "
        f"lost {figures['lost']} dup {figures['duplicated']} errors {figures['error_count']}"
        + ("" if figures["exact"] else "  (COUNTS NOT EXACT)")
    )


# -- part 4: --tracing, the streaming round with tracing off and on ---------------------------
#
# The same dashboard streaming round, each time on a fresh Daphne and SQLite file: without the
# OTEL variables (no tracing extension) and with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a local
# receiver (bench/_otlp_sink.py), which is what turns tracing on for every profile. Rounds
# alternate the order (off, on / on, off) so drift of a shared machine falls on both sides.

TRACING_TARGET_RATIO = 0.9
_OTEL_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_round(
    procs: harness.Processes, args: argparse.Namespace, workload: Workload, name: str, sink: Any
) -> dict[str, Any]:
    n, warm = args.clients, args.warmup
    env = procs.base_env(DATABASE_URL=harness.sqlite_url(procs.workdir / f"{name}.sqlite3"))
    for key in _OTEL_ENDPOINTS:
        env.pop(key, None)
    traced = sink is not None
    if traced:
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint,
            OTEL_SERVICE_NAME="zett-bench",
            OTEL_BSP_SCHEDULE_DELAY="1000",  # export during the round, not only at exit
        )
    harness.migrate(env)
    data = harness.setup_data(env, n + warm, workload.delay, workload.reply_words)
    server = procs.start_server(name, dashboard_app(env), env)
    before = sink.counts() if traced else None
    try:
        cookie = harness.login(server, data["user"], data["password"])
        targets = chat_targets(server, cookie, data["sessions"])
        if warm:
            asyncio.run(stream_round(targets[:warm], workload, bare=False))
        cpu_before = process_cpu_seconds(server.process.pid)
        figures = asyncio.run(stream_round(targets[warm:], workload, bare=False))
        cpu_after = process_cpu_seconds(server.process.pid)
    finally:
        procs.stop_server(server)  # its tracer provider flushes what is still queued at exit
    if cpu_before is not None and cpu_after is not None:
        figures["server_cpu_s"] = round(cpu_after - cpu_before, 3)
    if traced:
        after = sink.counts()
        exported = {key: after[key] - before[key] for key in after}
        figures["exported"] = exported
        figures["spans_per_answer"] = round(exported["spans"] / (n + warm), 2)
    return figures


def part_tracing(procs: harness.Processes, args: argparse.Namespace, workload: Workload) -> dict:
    from bench._otlp_sink import OtlpSink

    rounds: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with OtlpSink() as sink:
        for number in range(args.tracing_rounds):
            order = ("off", "on") if number % 2 == 0 else ("on", "off")
            for mode in order:
                figures = tracing_round(
                    procs,
                    args,
                    workload,
                    f"tracing-{mode}-{number + 1}",
                    sink if mode == "on" else None,
                )
                rounds[mode].append(figures)
                print(stream_line(f"tracing {mode} (round {number + 1})", figures), flush=True)

    def best(mode: str, key: str) -> float:
        return max(r[key] for r in rounds[mode])

    def median_of(mode: str, pick: Any) -> float | None:
        values = sorted(v for v in (pick(r) for r in rounds[mode]) if v is not None)
        return values[len(values) // 2] if values else None

    off_rate, on_rate = best("off", "tokens_per_s"), best("on", "tokens_per_s")
    ratio = on_rate / off_rate if off_rate else 0.0
    cpu_off = median_of("off", lambda r: r.get("server_cpu_s"))
    cpu_on = median_of("on", lambda r: r.get("server_cpu_s"))
    p99_off = median_of("off", lambda r: r["latency_ms"]["p99"])
    p99_on = median_of("on", lambda r: r["latency_ms"]["p99"])
    exported = min(r["exported"]["spans"] for r in rounds["on"]) if rounds["on"] else 0
    intact = all(
        r[key] == 0 and r["error_count"] == 0
        for mode in rounds
        for r in rounds[mode]
        for key in ("lost", "reordered", "duplicated", "unexpected", "final_mismatch")
    )
    return {
        "clients": args.clients,
        "rounds": args.tracing_rounds,
        "off": rounds["off"],
        "on": rounds["on"],
        "throughput_ratio_on_over_off": round(ratio, 3),
        "server_cpu_ratio_on_over_off": round(cpu_on / cpu_off, 3) if cpu_off and cpu_on else None,
        "p99_ms_off": p99_off,
        "p99_ms_on": p99_on,
        "targets": {
            f"throughput on >= {TRACING_TARGET_RATIO}x off": ratio >= TRACING_TARGET_RATIO,
            "spans exported in every traced round": exported > 0,
            "zero lost or reordered (tracing)": intact,
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
    parser.add_argument("--no-streaming", action="store_true", help="skip part [1]")
    parser.add_argument("--no-capacity", action="store_true", help="skip the capacity ramp")
    parser.add_argument(
        "--capacity-steps",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="active runs per step (250,500,1000,1500,2000)",
    )
    parser.add_argument("--capacity-sample", type=int, default=None, help="watched chats (50)")
    parser.add_argument("--ramp-rate", type=float, default=100.0, help="run starts per second")
    parser.add_argument("--window", type=float, default=None, help="seconds measured per step")
    parser.add_argument(
        "--postgres-admin-url",
        default=os.environ.get(
            "ZETT_BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--redis-db", type=int, default=9)
    parser.add_argument(
        "--burst",
        action="store_true",
        help="also: N sockets x M messages in waves, ttft and exact counts (with --redis: "
        "also on 2 processes, PG + Redis)",
    )
    parser.add_argument("--burst-sockets", type=int, default=None, help="--burst sockets (200)")
    parser.add_argument("--burst-messages", type=int, default=None, help="--burst waves (10)")
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="also: the dashboard streaming round with tracing off and on (OTLP to a local sink)",
    )
    parser.add_argument(
        "--tracing-rounds", type=int, default=2, help="off/on pairs for --tracing (2)"
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure to PATH")
    parser.add_argument("--quick", action="store_true", help="N=10, short answers, 2 steps")
    parser.add_argument(
        "--what-if",
        type=lambda s: [x for x in s.split(",") if x],
        default=[],
        help="patch the dashboard servers with proposed fixes: " + ",".join(harness.WHATIF_CHOICES),
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.clients = args.clients or (10 if quick else 100)
    args.warmup = args.warmup if args.warmup is not None else (2 if quick else 10)
    args.capacity_steps = args.capacity_steps or (
        [10, 20] if quick else [250, 500, 1000, 1500, 2000]
    )
    args.capacity_sample = args.capacity_sample or (5 if quick else 50)
    args.burst_sockets = args.burst_sockets or (20 if quick else 200)
    args.burst_messages = args.burst_messages or (3 if quick else 10)
    args.window = args.window if args.window is not None else (3.0 if quick else 20.0)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
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
        if not args.no_streaming:
            print("\n[1] streaming: dashboard (1 Daphne, SQLite, in-memory layer) vs bare ASGI")
            streaming = part_streaming(procs, args, workload)
            results["streaming"] = streaming
            print(stream_line("bare ASGI", streaming["bare"]))
            print(stream_line("dashboard", streaming["dashboard"]))
            print(f"  throughput ratio dashboard/bare: {streaming['throughput_ratio']}")
            print(verdicts(streaming["targets"]), flush=True)
            failed |= not all(streaming["targets"].values())
        if not args.no_capacity:
            print(
                f"\n[2] capacity: N runs started through chat sockets at "
                f"{args.ramp_rate:g}/s, all but {args.capacity_sample} sockets closed, one "
                f"monitor open; fresh Daphne + SQLite per step, {args.window:g} s window"
            )
            capacity = part_capacity(procs, args)
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
        if args.burst:
            print(
                f"\n[5] --burst: {args.burst_sockets} sockets x {args.burst_messages} messages, "
                "every socket sending at once, wave after wave"
            )
            burst = part_burst(procs, args)
            results["burst"] = burst
            print(burst_line("1 process, SQLite", burst["one_process_sqlite"]))
            if "two_processes_redis" in burst:
                print(burst_line("2 processes, redis", burst["two_processes_redis"]))
            print(verdicts(burst["targets"]), flush=True)
            failed |= not all(burst["targets"].values())
        if args.tracing:
            print(
                f"\n[4] --tracing: 1 Daphne, SQLite, tracing off vs on (OTLP/HTTP to a local "
                f"receiver), {args.tracing_rounds} rounds, alternating order"
            )
            tracing = part_tracing(procs, args, workload)
            results["tracing"] = tracing
            print(
                f"  ratios on/off: throughput {tracing['throughput_ratio_on_over_off']}, "
                f"server CPU {tracing['server_cpu_ratio_on_over_off']}; p99 off/on "
                f"{tracing['p99_ms_off']}/{tracing['p99_ms_on']} ms"
            )
            print(verdicts(tracing["targets"]), flush=True)
            failed |= not all(tracing["targets"].values())
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
