"""HostSettings: every knob of run hosting, read once from Django settings with one default each."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True, slots=True)
class HostSettings:
    run_workers: bool = False  # ZETT_RUN_WORKERS: web processes queue runs for workers
    delta_batch_seconds: float = 0.025  # ZETT_DELTA_BATCH_SECONDS
    monitor_interval_seconds: float = 0.25  # ZETT_MONITOR_INTERVAL_SECONDS
    heartbeat_seconds: float = 2.0  # ZETT_HEARTBEAT_SECONDS: host lease renewal period
    stale_run_seconds: float = 10.0  # ZETT_STALE_RUN_SECONDS: a lease older than this expired
    db_retry_seconds: float = 30.0  # ZETT_DB_RETRY_SECONDS: how long a database hop is retried
    control_timeout_seconds: float = 5.0  # how long an action waits for the hosting process
    snapshot_timeout_seconds: float = 2.0  # how long a snapshot waits for the hosting process
    checkpoint_seconds: float = 1.0  # the streaming answer is checkpointed this often at most

    @classmethod
    def load(cls) -> HostSettings:
        """The values of the current Django settings (zett_site.settings documents each)."""
        defaults = cls()

        def number(name: str, default: float) -> float:
            return float(getattr(settings, name, default))

        return cls(
            run_workers=bool(getattr(settings, "ZETT_RUN_WORKERS", defaults.run_workers)),
            delta_batch_seconds=number("ZETT_DELTA_BATCH_SECONDS", defaults.delta_batch_seconds),
            monitor_interval_seconds=number(
                "ZETT_MONITOR_INTERVAL_SECONDS", defaults.monitor_interval_seconds
            ),
            heartbeat_seconds=number("ZETT_HEARTBEAT_SECONDS", defaults.heartbeat_seconds),
            stale_run_seconds=number("ZETT_STALE_RUN_SECONDS", defaults.stale_run_seconds),
            db_retry_seconds=number("ZETT_DB_RETRY_SECONDS", defaults.db_retry_seconds),
        )

    @property
    def lease_cutoff_seconds(self) -> float:
        """Age past which a lease counts as expired: one beat of slack below the stale time."""
        return max(self.heartbeat_seconds, self.stale_run_seconds - self.heartbeat_seconds)
