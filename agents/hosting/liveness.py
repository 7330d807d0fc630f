"""Liveness: this process's host lease, the reaper of dead hosts' runs, start-up recovery.

Liveness belongs to the process, not to each run. A thread of its own renews the lease
(one ``Host`` row) on its own database connection, so a busy or starved event loop cannot
make a healthy host look dead. A run is reaped only when its host's lease expired, and a
host never reaps itself. After this process lost the database for a while it does not
reap anybody until it has been connected for a whole stale period again: the other hosts
were cut off too and need one beat to renew their leases.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from .. import observability
from . import db
from .settings import HostSettings

log = logging.getLogger(__name__)

Reaped = list[tuple[str, str, dict[str, Any]]]


class LeaseThread(threading.Thread):
    """Renews the host lease every heartbeat until stopped; remembers since when it works."""

    def __init__(self, host_id: str, period: float) -> None:
        super().__init__(name="zett-host-lease", daemon=True)
        self.host_id = host_id
        self.period = period
        self.stopping = threading.Event()
        self.renewed = threading.Event()  # set after the first successful renewal
        self.connected_since: float | None = time.monotonic()
        self.last_renewal: float | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            self.renew()
            self.stopping.wait(self.period)
        try:
            close_old_connections()
            db.drop_lease_now(self.host_id)
        except DatabaseError:
            pass
        finally:
            connection.close()

    def renew(self) -> None:
        try:
            close_old_connections()
            db.renew_lease_now(self.host_id)
        except Exception as exc:  # any failure: the lease is not renewed, try next beat
            if self.connected_since is not None:
                log.warning("could not renew the host lease: %s", exc)
            self.connected_since = None
            connection.close()
            return
        now = time.monotonic()
        if self.connected_since is None:
            log.info("host lease renewed again after a database outage")
            self.connected_since = now
        observability.lease_renewed(now, self.last_renewal, self.period)
        self.last_renewal = now
        self.renewed.set()

    def connected_for(self) -> float:
        since = self.connected_since
        return 0.0 if since is None else time.monotonic() - since


class Liveness:
    """The lease thread plus the reaper loop on the event loop."""

    def __init__(
        self,
        host_id: str,
        settings: HostSettings,
        *,
        hosted: Callable[[], list[str]],
        on_reaped: Callable[[Reaped], Awaitable[None]],
        on_lost: Callable[[set[str]], None],
    ) -> None:
        self.host_id = host_id
        self.settings = settings
        self._hosted = hosted
        self._on_reaped = on_reaped
        self._on_lost = on_lost
        self.lease = LeaseThread(host_id, settings.heartbeat_seconds)
        self._had_outage = False

    def start(self) -> None:
        self.lease.start()

    def stop(self) -> None:
        self.lease.stopping.set()

    def may_reap(self) -> bool:
        if self.lease.connected_since is None:
            self._had_outage = True
            return False
        if self._had_outage and self.lease.connected_for() < self.settings.stale_run_seconds:
            return False
        self._had_outage = False
        return True

    async def reap_once(self) -> list[str]:
        """Reap the runs of expired hosts now (if this host may); returns their request ids."""
        if not self.may_reap():
            return []
        cutoff = timezone.now() - timedelta(seconds=self.settings.lease_cutoff_seconds)
        stale = await db.reap(self.host_id, cutoff)
        observability.runs_reaped(len(stale))
        if stale:
            log.warning("marked %d run(s) of stopped processes as interrupted", len(stale))
            await self._on_reaped(stale)
        return [request_id for request_id, _, _ in stale]

    async def run(self) -> None:
        """Every heartbeat: reap dead hosts' runs; stop ours that someone else reaped."""
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                await self.reap_once()
                ours = self._hosted()
                if ours and self.lease.connected_since is not None:
                    alive = await db.still_active(self.host_id, ours)
                    lost = set(ours) - alive
                    if lost:
                        self._on_lost(lost)
            except Exception as exc:  # the database is away: the next beat tries again
                log.warning("reaper pass failed: %s", exc)


def recover_at_start_up(settings: HostSettings) -> int:
    """Mark runs of hosts whose lease expired as interrupted (sync, before serving)."""
    cutoff = timezone.now() - timedelta(seconds=settings.lease_cutoff_seconds)
    try:
        reaped = db.reap_now(None, cutoff)
    except DatabaseError as exc:  # e.g. not migrated yet: the reaper loop retries later
        log.warning("could not recover stale runs at start-up: %s", exc)
        return 0
    observability.runs_reaped(len(reaped))
    if reaped:
        log.warning("marked %d run(s) of stopped processes as interrupted", len(reaped))
    return len(reaped)
