"""Observability for operators: Prometheus metrics at /metrics and one log line per run and action.

The host calls the functions re-exported here, one line at each spot (a run started or
finished, an operator acted, a socket opened, a send failed, the lease was renewed, runs
were reaped); traces come from the runtime's ``agents.extensions.tracing`` instead.
"""

from .logs import JsonFormatter
from .metrics import (
    RunMeter,
    channel_send_failed,
    lease_renewed,
    operator_action,
    runs_reaped,
    socket_closed,
    socket_opened,
    watch_runs,
)

__all__ = [
    "JsonFormatter",
    "RunMeter",
    "channel_send_failed",
    "lease_renewed",
    "operator_action",
    "runs_reaped",
    "socket_closed",
    "socket_opened",
    "watch_runs",
]
