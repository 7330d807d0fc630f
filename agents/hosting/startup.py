"""Process start-up for the run host: recover runs of dead processes, start the RunManager.

Daphne implements no ASGI lifespan, so the RunManager starts with the server's event loop
(or the first connection this process serves); the database part of the recovery (marking
runs whose host's lease expired as interrupted) runs at import time.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)


def recover_stale_runs() -> int:
    """Mark active runs whose host's lease expired as interrupted (sync, at start-up)."""
    from .liveness import recover_at_start_up
    from .settings import HostSettings

    return recover_at_start_up(HostSettings.load())


def start_manager_with_server() -> bool:
    """Start the RunManager as soon as Daphne's event loop runs, before any connection.

    Without it a process that serves no traffic would never reap the runs of a dead
    peer. Daphne creates its loop (``daphne.server.twisted_loop``) before it imports the
    application; elsewhere (tests, runworker) the first connection starts the manager.
    """
    import sys

    server = sys.modules.get("daphne.server")
    loop = getattr(server, "twisted_loop", None)
    if loop is None or loop.is_closed():
        return False
    # The ORM thread's short calls give the GIL back to a busy event loop and then wait a
    # whole switch interval (5 ms by default) to get it again, so under load every hop to
    # the database costs at least that; a shorter interval keeps run starts moving.
    sys.setswitchinterval(float(getattr(settings, "ZETT_THREAD_SWITCH_SECONDS", 0.001)))

    def start() -> None:
        from .manager import get_run_manager

        task = loop.create_task(get_run_manager().start())
        task.add_done_callback(_log_start_failure)

    loop.call_soon_threadsafe(start)
    return True


def _log_start_failure(task: Any) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("could not start the run manager", exc_info=task.exception())


class StartRunManager:
    """ASGI middleware starting this process's RunManager on the first connection."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._started_loops: set[int] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] in ("http", "websocket"):
            import asyncio

            loop_id = id(asyncio.get_running_loop())
            if loop_id not in self._started_loops:
                from .manager import get_run_manager

                self._started_loops.add(loop_id)
                try:
                    await get_run_manager().start()
                except Exception:
                    self._started_loops.discard(loop_id)
                    log.exception("could not start the run manager")
        return await self.app(scope, receive, send)
