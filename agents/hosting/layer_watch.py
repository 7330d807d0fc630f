"""LayerWatch: notices when the channel layer was away, so groups are joined again.

Redis keeps group memberships in memory: after it restarts every group is empty, and the
channel layer is at-most-once, so frames sent meanwhile are gone. One watch per process
probes the layer every second (and, on Redis, its server's ``run_id``, which changes on
a restart even when no probe failed). When the layer is back it tells its subscribers:
the run host re-joins its control groups, each socket re-joins its session group and
sends its page a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..per_loop import PerLoop

log = logging.getLogger(__name__)

Listener = Callable[[], Awaitable[None]]

PROBE_GROUP = "zett.layer-probe"


class LayerWatch:
    def __init__(self, layer: Any, interval: float = 1.0) -> None:
        self.layer = layer
        self.interval = interval
        self.healthy = True
        self._listeners: set[Listener] = set()
        self._server_id: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._channel: str | None = None

    @property
    def can_forget(self) -> bool:
        """Whether the layer can lose groups while this process lives (Redis can)."""
        return getattr(self.layer, "connection", None) is not None

    def subscribe(self, listener: Listener) -> None:
        if not self.can_forget:
            return  # the in-memory layer loses groups only with the process
        self._listeners.add(listener)
        self._ensure_running()

    def unsubscribe(self, listener: Listener) -> None:
        self._listeners.discard(listener)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._watch(), name="zett-layer-watch"
            )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def reported_failure(self) -> None:
        """Someone saw the layer fail: probe now instead of at the next tick."""
        await self.probe()

    async def probe(self) -> bool:
        """True when the layer answers; tells the listeners when it came back or restarted."""
        try:
            if self._channel is None:
                self._channel = await self.layer.new_channel()
            await self.layer.group_add(PROBE_GROUP, self._channel)
            server_id = await self._server_run_id()
        except Exception as exc:
            if self.healthy:
                log.warning("the channel layer is unreachable: %s", exc)
            self.healthy = False
            return False
        restarted = server_id is not None and self._server_id not in (None, server_id)
        self._server_id = server_id or self._server_id
        if not self.healthy or restarted:
            log.info("the channel layer is back%s", " (restarted)" if restarted else "")
            self.healthy = True
            await self._tell()
        return True

    async def _server_run_id(self) -> str | None:
        connection = getattr(self.layer, "connection", None)
        if connection is None:
            return None  # the in-memory layer cannot lose groups without losing the process
        info = await connection(0).info("server")
        return str(info.get("run_id") or "") or None

    async def _tell(self) -> None:
        for listener in list(self._listeners):
            try:
                await listener()
            except Exception:
                log.exception("a listener of the channel layer's return failed")

    async def _watch(self) -> None:
        while True:
            await self.probe()
            await asyncio.sleep(self.interval)


_watches: PerLoop[LayerWatch] = PerLoop()


def layer_watch(layer: Any) -> LayerWatch:
    """The LayerWatch of the running event loop (created on first use)."""
    return _watches.get(lambda: LayerWatch(layer))
