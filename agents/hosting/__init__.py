"""Run hosting: the runs this process executes, and how pages, workers and the CLI reach them.

This face is all that ``agents.web``, the worker, the ASGI entry point and ``manage.py
agent`` import. Inside, one concept per module, imports pointing down this list:

    startup, worker -> manager -> policy, snapshot, liveness, control_bus, run, starts
    run -> projection, outbox, db, starts, profiles.cache;  projection -> payloads, wire
    liveness -> db, settings;  db -> starts, models, payloads;  starts -> models
    (GroupCommit and PerLoop are agents.group_commit and agents.per_loop, below this package)
    wire, settings -> nothing of ours

The state machine of a run (``Run.status``)::

    queued ──claim──> running <──> waiting        (waiting: an operator's answer is due)
      │                  │
      │                  ├──> completed            the agent finished
      │                  ├──> failed               model, profile or database error
      │                  ├──> cancelled            an operator or the interrupt policy
      │                  └──> interrupted          its host stopped (reaped), or shut down
      └──(no worker took it)──> interrupted

A run is created ``running`` with its host when the web process hosts it, ``queued``
without a host when ``ZETT_RUN_WORKERS`` hands it to a worker, which claims it. Who writes
which Run field:

- ``starts.create_run`` (intake, one transaction with the input Message and the session's
  title and status): every field at creation; ``starts.claim_run``: host, status, started_at.
- the hosting process's ``HostedRun`` (through its pure ``RunProjection``, saved by
  ``db.checkpoint`` / ``db.finish_run``): status between running and waiting, phase,
  current_tool, waiting_for, iterations, tokens, partial_text, error, cancel_state,
  finished_at.
- ``db.request_cancel`` (a process that does not host the run): cancel_state "" ->
  requested, before it asks the host over the control bus.
- the reaper (``liveness``, any process but the run's host, only once the host's lease
  expired): status interrupted, phase, error, waiting_for, current_tool, finished_at; the
  last checkpointed partial_text becomes a partial assistant message.

Nothing a page shows as stored is sent before its row is committed; liveness is one lease
per process; database hops are retried on fresh connections; a run's final record is
retried until the database is back, so no session stays "running".
"""

from .db import transcript_now as session_transcript
from .layer_watch import layer_watch
from .manager import RunManager, get_run_manager
from .payloads import call_dict, format_cost, message_dict, run_row, run_row_of
from .wire import (
    HOST_ID,
    MONITOR_GROUP,
    REAPED_SEQ,
    WORKER_CHANNEL,
    ControlReply,
    Partial,
    Snapshot,
    control_group,
    session_group,
)

__all__ = [
    "HOST_ID",
    "MONITOR_GROUP",
    "REAPED_SEQ",
    "WORKER_CHANNEL",
    "ControlReply",
    "Partial",
    "RunManager",
    "Snapshot",
    "call_dict",
    "format_cost",
    "control_group",
    "get_run_manager",
    "layer_watch",
    "message_dict",
    "run_row",
    "run_row_of",
    "session_group",
    "session_transcript",
]
