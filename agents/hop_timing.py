"""Where the ORM thread's time goes: a per-hop-kind counter, on only when asked for.

With ``ZETT_DB_HOP_PROFILE=path`` every database hop (agents.db_retry) records, under its
function's name, how many times it ran, the seconds it spent running on its thread and the
seconds its caller waited in all (queueing behind other hops included). The table is
written to ``path`` as JSON at most once a second and when the process exits, so a
benchmark reads it after stopping the server. Off (the default), a hop pays one ``if``.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

PROFILE_PATH = os.environ.get("ZETT_DB_HOP_PROFILE", "").strip()
enabled = bool(PROFILE_PATH)

_lock = threading.Lock()
_table: dict[str, list[float]] = {}  # name -> [count, run seconds, waited seconds]
_started = time.monotonic()
_written = 0.0


def timed_on_thread(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped to add its running time to ``name``'s row."""

    def call(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - began
            with _lock:
                row = _table.setdefault(name, [0, 0.0, 0.0])
                row[0] += 1
                row[1] += spent

    return call


def waited(name: str, seconds: float) -> None:
    """Add a caller's whole wait for one hop to ``name``'s row, and write now and then."""
    global _written
    with _lock:
        _table.setdefault(name, [0, 0.0, 0.0])[2] += seconds
    now = time.monotonic()
    if now - _written >= 1.0:
        _written = now
        write()


def snapshot() -> dict[str, Any]:
    with _lock:
        rows = {name: list(row) for name, row in _table.items()}
    wall = time.monotonic() - _started
    return {
        "wall_s": round(wall, 3),
        "hops": {
            name: {"count": int(c), "run_s": round(r, 4), "waited_s": round(w, 4)}
            for name, (c, r, w) in sorted(rows.items(), key=lambda item: -item[1][1])
        },
    }


def write() -> None:
    if not enabled or not _table:  # a process that made no hop leaves the file alone
        return
    tmp = f"{PROFILE_PATH}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(snapshot(), out, indent=1)
    os.replace(tmp, PROFILE_PATH)


if enabled:
    atexit.register(write)
