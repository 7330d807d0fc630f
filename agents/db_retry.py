"""Database hops that survive a dropped connection: retried on a fresh connection with backoff.

A failover, a server restart or ``pg_terminate_backend`` leaves the ORM thread holding a dead
connection; SQLite answers "database is locked" under a burst. Both raise OperationalError
(or InterfaceError) and change nothing, since every hop is one transaction. ``db_hop`` closes
the connection that failed and tries again until ``ZETT_DB_RETRY_SECONDS`` have passed, then
raises DatabaseUnavailable, whose message is what the person sees.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from . import hop_timing

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

RETRYABLE = (OperationalError, InterfaceError)


class DatabaseUnavailable(RuntimeError):
    """The database did not answer within the retry window."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"database unavailable: {str(cause).strip() or type(cause).__name__}")


def _closing_on_failure(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RETRYABLE:
            # The next attempt on this thread must not reuse the broken connection.
            for connection in connections.all(initialized_only=True):
                if not connection.in_atomic_block:
                    connection.close()
            raise

    return call


def retry_window() -> float:
    return float(getattr(settings, "ZETT_DB_RETRY_SECONDS", 30.0))


async def retrying(
    fn: Callable[P, R], *args: P.args, thread_sensitive: bool = True, **kwargs: P.kwargs
) -> R:
    """Run the sync ORM function ``fn`` off the event loop, retrying connection errors."""
    body: Callable[..., R] = _closing_on_failure(fn)
    began = 0.0
    if hop_timing.enabled:
        name = getattr(fn, "__name__", "hop")
        body = hop_timing.timed_on_thread(name, body)
        began = time.perf_counter()
    call = sync_to_async(body, thread_sensitive=thread_sensitive)
    deadline = time.monotonic() + retry_window()
    delay = 0.05
    attempt = 0
    while True:
        try:
            result = await call(*args, **kwargs)
            if began:
                hop_timing.waited(name, time.perf_counter() - began)
            return result
        except RETRYABLE as exc:
            attempt += 1
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(exc) from exc
            if attempt == 1:
                log.warning("database hop %s failed (%s); retrying", fn.__name__, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


def db_hop(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Decorate a short sync ORM function as an awaitable, retried database hop."""

    @functools.wraps(fn)
    async def hop(*args: P.args, **kwargs: P.kwargs) -> R:
        return await retrying(fn, *args, **kwargs)

    return hop


def db_hop_own_thread(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Like db_hop, on a worker thread with its own connection (not behind the ORM thread)."""

    @functools.wraps(fn)
    def closing(*args: Any, **kwargs: Any) -> R:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    @functools.wraps(fn)
    async def hop(*args: P.args, **kwargs: P.kwargs) -> R:
        return await retrying(closing, *args, thread_sensitive=False, **kwargs)

    return hop
