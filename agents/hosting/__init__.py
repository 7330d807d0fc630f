"""Run hosting: the runs this process executes, and how pages, workers and the CLI reach them."""

from .manager import (
    HOST_ID,
    MONITOR_GROUP,
    WORKER_CHANNEL,
    ControlReply,
    RunManager,
    control_group,
    get_run_manager,
    session_group,
)
from .payloads import call_dict, message_dict, run_row

__all__ = [
    "HOST_ID",
    "MONITOR_GROUP",
    "WORKER_CHANNEL",
    "ControlReply",
    "RunManager",
    "call_dict",
    "control_group",
    "get_run_manager",
    "message_dict",
    "run_row",
    "session_group",
]
