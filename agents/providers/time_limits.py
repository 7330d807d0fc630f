"""Time limits of one model call: an idle timeout counted in data events, and a deadline.

An HTTP client's read timeout starts again on every byte, so a server that sends nothing
but SSE keep-alive comments holds a call open forever. The SDK adapters therefore wait for
every stream item through a ``CallClock``: its idle timer starts again only when an item
arrives, and its deadline bounds the whole call, the SDK's retries included. The SDKs yield
data events only (comments, and Anthropic's ``ping`` events, are dropped before), so an
item is always part of the answer.

Only the adapter's own waits are bounded. Time the caller spends between two items counts
toward the deadline but is never interrupted, so the timeout cannot cancel the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from .errors import ProviderError, timeout_error

#: Seconds one model call may take in all, unless a profile sets ``deadline``.
DEFAULT_DEADLINE = 600.0

_Item = TypeVar("_Item")


def check_limits(*, timeout: float, deadline: float) -> None:
    """ValueError unless both limits are positive and the deadline allows one idle wait."""
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if deadline <= 0:
        raise ValueError("deadline must be positive")
    if deadline < timeout:
        raise ValueError(
            f"deadline ({deadline:g} s) must be at least the timeout ({timeout:g} s): "
            "a call is allowed at least one full wait for data"
        )


def deadline_error(*, provider: str, where: str, deadline: float) -> ProviderError:
    """The ProviderError for a call that was still not complete when its deadline passed."""
    return ProviderError(
        f"{where} did not finish the answer within {deadline:g} s, the deadline for one model "
        "call. Raise the deadline setting if answers this long are expected, or try again.",
        provider=provider,
        kind="timeout",
    )


class CallClock:
    """The running limits of one model call; create it when the call starts."""

    def __init__(
        self, *, provider: str, where: str, timeout: float, deadline: float, max_retries: int
    ) -> None:
        check_limits(timeout=timeout, deadline=deadline)
        self._loop = asyncio.get_running_loop()
        self._provider = provider
        self._where = where
        self._timeout = timeout  # seconds allowed between two data events
        self._deadline = deadline  # seconds allowed for the whole call
        self._max_retries = max_retries
        started = self._loop.time()
        self._deadline_at = started + deadline
        self._idle_at = started + timeout  # restarted when the stream opens and on each item

    async def request(self, opening: Awaitable[_Item]) -> _Item:
        """Await the opening of the stream (retries included); only the deadline applies.

        The SDK's own timeout covers a server that sends no headers at all. The idle timer
        starts once the stream is open, so time spent in retries is not counted as silence.
        """
        stream = await self._bounded(opening, self._deadline_at)
        self._idle_at = self._loop.time() + self._timeout
        return stream

    async def next(self, items: AsyncIterator[_Item]) -> _Item:
        """The next stream item, ``StopAsyncIteration`` at the end, ProviderError on a limit."""
        item = await self._bounded(anext(items), min(self._idle_at, self._deadline_at))
        self._idle_at = self._loop.time() + self._timeout
        return item

    async def _bounded(self, waiting: Awaitable[_Item], when: float) -> _Item:
        try:
            async with asyncio.timeout_at(when) as scope:
                return await waiting
        except TimeoutError:
            if not scope.expired():
                raise  # raised by the awaited code itself, not by our limit
        if when >= self._deadline_at:
            raise deadline_error(
                provider=self._provider, where=self._where, deadline=self._deadline
            )
        raise timeout_error(
            provider=self._provider,
            where=self._where,
            timeout=self._timeout,
            max_retries=self._max_retries,
            streaming=True,
        )
