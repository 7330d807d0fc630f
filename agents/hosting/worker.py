"""RunWorkerConsumer: `manage.py runworker zett-runs` hosts the runs web processes queue.

With ``ZETT_RUN_WORKERS=1`` the web processes create each Run row unclaimed and
send its request id to the ``zett-runs`` channel; a worker claims the row in
the database (so one worker hosts it even if the message were delivered twice)
and runs it with its own RunManager. Everything else (frames, control,
heartbeats, the reaper) works as for runs hosted in a web process.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.consumer import AsyncConsumer

from .manager import get_run_manager

log = logging.getLogger(__name__)


class RunWorkerConsumer(AsyncConsumer):
    """Consumes ``run.start`` messages of the ``zett-runs`` channel."""

    async def run_start(self, message: dict[str, Any]) -> None:
        request_id = message.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            log.warning("ignored a malformed run.start message: %r", message)
            return
        if not await get_run_manager().host_dispatched(request_id):
            log.info("run %s was already claimed or is gone", request_id)
