"""Prometheus metrics of this process: runs, tokens, model and tool timings, sockets, liveness.

Every series is per process and carries a ``process`` label (host name and pid), added
when the registry is collected: each Daphne process (and worker) serves its own numbers
at its own /metrics, and Prometheus scrapes every process, not a load balancer in front
of them; ``sum without (process)`` gives the site's totals. The client's multiprocess
mode is not used: it needs a shared directory and clean-up of dead processes' files,
which processes on several machines cannot share anyway.
"""

from __future__ import annotations

import os
import socket
import time
import weakref
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..runtime.events import AgentEvent, AgentEventType
from .logs import log_operator_action, log_run_finished, log_run_started

PROCESS = f"{socket.gethostname()}:{os.getpid()}"

REGISTRY = CollectorRegistry(auto_describe=True)

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

RUNS_STARTED = Counter(
    "zett_runs_started", "Runs this process started hosting.", ["profile"], registry=REGISTRY
)
RUNS_FINISHED = Counter(
    "zett_runs_finished",
    "Runs this process hosted to their end, by outcome (completed, failed, cancelled, "
    "interrupted).",
    ["profile", "outcome"],
    registry=REGISTRY,
)
RUN_DURATION = Histogram(
    "zett_run_duration_seconds",
    "Wall time of a hosted run, from hosting to its end.",
    ["profile", "outcome"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
TOKENS = Counter(
    "zett_tokens",
    "Tokens the models reported, by kind: input and output (all of them), and the parts "
    "cache_read, cache_write (of input) and reasoning (of output).",
    ["profile", "kind"],
    registry=REGISTRY,
)
COST = Counter(
    "zett_cost",
    "What hosted runs cost, settled when each run ends, by profile and currency (the "
    "prices in force when it started; runs of unpriced models add nothing).",
    ["profile", "currency"],
    registry=REGISTRY,
)
MODEL_CALL_DURATION = Histogram(
    "zett_model_call_duration_seconds",
    "One model call, from its start to its complete answer.",
    ["profile"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "zett_time_to_first_token_seconds",
    "From a model call's start to its first streamed text, reasoning or tool-call delta.",
    ["profile"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
TOOL_CALL_DURATION = Histogram(
    "zett_tool_call_duration_seconds",
    "One tool call, waits for approval included, by tool and status (completed, failed).",
    ["tool", "status"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
OPERATOR_ACTIONS = Counter(
    "zett_operator_actions",
    "Operator actions (approve, deny, answer, steer, cancel, ...) and whether they were taken.",
    ["action", "accepted"],
    registry=REGISTRY,
)
WEBSOCKETS_OPEN = Gauge(
    "zett_websockets_open", "WebSockets open on this process.", ["consumer"], registry=REGISTRY
)
CHANNEL_SEND_FAILURES = Counter(
    "zett_channel_send_failures",
    "Channel-layer sends that failed (the layer is away): session frames, monitor rows, "
    "reaped-run notices.",
    ["kind"],
    registry=REGISTRY,
)
LEASE_RENEWAL_LAG = Histogram(
    "zett_lease_renewal_lag_seconds",
    "How much later than its heartbeat the host lease was renewed.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
    registry=REGISTRY,
)
LEASE_RENEWED_AT = Gauge(
    "zett_lease_last_renewal_timestamp_seconds",
    "When this process last renewed its host lease (alert on time() minus this).",
    registry=REGISTRY,
)
RUNS_REAPED = Counter(
    "zett_runs_reaped",
    "Runs of stopped processes this process marked interrupted.",
    registry=REGISTRY,
)


# -- runs ------------------------------------------------------------------------------------

_DELTAS = frozenset(
    {AgentEventType.TEXT_DELTA, AgentEventType.REASONING_DELTA, AgentEventType.TOOL_CALL_DELTA}
)
_TOOL_ENDS = {
    AgentEventType.TOOL_COMPLETED: "completed",
    AgentEventType.TOOL_FAILED: "failed",
}


class RunMeter:
    """One hosted run's metrics and log lines, fed the run's outward events as they pass."""

    __slots__ = (
        "profile",
        "session_id",
        "request_id",
        "user_id",
        "_hosted_at",
        "_model_started",
        "_awaiting_first",
        "_tools",
    )

    def __init__(self, profile: str, session_id: str, request_id: str, user_id: Any) -> None:
        self.profile = profile
        self.session_id = session_id
        self.request_id = request_id
        self.user_id = user_id
        self._hosted_at = time.monotonic()
        self._model_started = 0.0
        self._awaiting_first = False
        self._tools: dict[str, float] = {}  # call id -> when it started

    def started(self) -> None:
        self._hosted_at = time.monotonic()
        RUNS_STARTED.labels(self.profile).inc()
        log_run_started(self.profile, self.session_id, self.request_id, self.user_id)

    def event(self, event: AgentEvent) -> None:
        kind = event.type
        if kind in _DELTAS:
            if self._awaiting_first:
                self._awaiting_first = False
                TIME_TO_FIRST_TOKEN.labels(self.profile).observe(
                    time.monotonic() - self._model_started
                )
        elif kind is AgentEventType.MODEL_STARTED:
            self._model_started = time.monotonic()
            self._awaiting_first = True
        elif kind is AgentEventType.MODEL_COMPLETED:
            MODEL_CALL_DURATION.labels(self.profile).observe(time.monotonic() - self._model_started)
            self._awaiting_first = False
            if event.usage is not None:
                self._count_tokens(event.usage)
        elif kind is AgentEventType.TOOL_STARTED and event.tool_call is not None:
            self._tools[event.tool_call.id] = time.monotonic()
        elif kind in _TOOL_ENDS and event.tool_call is not None:
            started = self._tools.pop(event.tool_call.id, None)
            if started is not None:
                TOOL_CALL_DURATION.labels(event.tool_call.name, _TOOL_ENDS[kind]).observe(
                    time.monotonic() - started
                )

    def _count_tokens(self, usage: Any) -> None:
        profile = self.profile
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count:
                TOKENS.labels(profile, kind).inc(count)

    def finished(
        self, outcome: str, error: str = "", cost: Decimal | None = None, currency: str = ""
    ) -> None:
        """The run ended; ``cost`` (None: unpriced) is its settled cost in ``currency``."""
        duration = time.monotonic() - self._hosted_at
        RUNS_FINISHED.labels(self.profile, outcome).inc()
        if cost is not None and currency:
            # Prometheus samples are floats: the exact Decimal stays in the Run row.
            COST.labels(self.profile, currency).inc(float(cost))
        RUN_DURATION.labels(self.profile, outcome).observe(duration)
        log_run_finished(
            self.profile, self.session_id, self.request_id, self.user_id, outcome, duration, error
        )


def operator_action(
    session_id: str, request_id: str, user_id: Any, action: str, accepted: bool, reason: str
) -> None:
    """One operator action was answered: count it and log it."""
    OPERATOR_ACTIONS.labels(action, "true" if accepted else "false").inc()
    log_operator_action(session_id, request_id, user_id, action, accepted, reason)


# -- active runs, read from the run managers when scraped -----------------------------------

_managers: weakref.WeakSet[Any] = weakref.WeakSet()


def watch_runs(manager: Any) -> None:
    """Report a RunManager's hosted runs (``manager.hosted``) as zett_runs_active."""
    _managers.add(manager)


class _ActiveRuns:
    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "zett_runs_active",
            "Runs this process hosts now, by status (running, waiting) and phase.",
            labels=["status", "phase"],
        )
        tally: Tally[tuple[str, str]] = Tally()
        for manager in list(_managers):
            for hosted in list(manager.hosted.values()):  # one C-level copy: safe off-loop
                run = hosted.run
                tally[(str(run.status), str(run.phase))] += 1
        for (status, phase), count in sorted(tally.items()):
            family.add_metric([status, phase], count)
        yield family

    def describe(self) -> Iterable[Metric]:
        return ()


REGISTRY.register(_ActiveRuns())


# -- sockets, channel layer, liveness ---------------------------------------------------------


def socket_opened(consumer: Any, kind: str) -> None:
    """A consumer accepted its WebSocket; ``socket_closed`` on its disconnect undoes it."""
    consumer._zett_metered_socket = kind
    WEBSOCKETS_OPEN.labels(kind).inc()


def socket_closed(consumer: Any) -> None:
    kind = getattr(consumer, "_zett_metered_socket", None)
    if kind is not None:  # refused sockets were never counted
        consumer._zett_metered_socket = None
        WEBSOCKETS_OPEN.labels(kind).dec()


def channel_send_failed(kind: str) -> None:
    CHANNEL_SEND_FAILURES.labels(kind).inc()


def lease_renewed(now: float, previous: float | None, period: float) -> None:
    """The lease was renewed at ``now`` (monotonic); the previous renewal was at ``previous``."""
    LEASE_RENEWED_AT.set(time.time())
    if previous is not None:
        LEASE_RENEWAL_LAG.observe(max(0.0, now - previous - period))


def runs_reaped(count: int) -> None:
    if count:
        RUNS_REAPED.inc(count)


# -- exposition --------------------------------------------------------------------------------


class ProcessLabelled:
    """The registry's metrics with a ``process`` label on every sample."""

    def __init__(self, registry: CollectorRegistry, process: str = PROCESS) -> None:
        self.registry = registry
        self.process = process

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                sample._replace(labels={**sample.labels, "process": self.process})
                for sample in family.samples
            ]
            yield labelled


EXPOSED = CollectorRegistry(auto_describe=False)
EXPOSED.register(ProcessLabelled(REGISTRY))
