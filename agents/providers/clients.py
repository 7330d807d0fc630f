"""SDK clients shared by the model calls of one event loop, and closed when that loop ends.

An SDK client owns a connection pool bound to the event loop that opened its connections,
so one client cannot serve two loops; within a loop, reusing it keeps connections (and
their TLS sessions) open from one model call to the next instead of paying a handshake per
call. ``LoopClients`` keeps one client per loop and API key. To close them, a small async
generator is parked per loop: loops finalise their async generators when they shut down
(``asyncio.run``, ``asyncio.Runner`` and asgiref's ``async_to_sync`` all do), and its
``finally`` closes that loop's clients. A call that is cancelled or closed early still
closes its own HTTP response, which drops that one connection from the pool.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Generic, Protocol, TypeVar


class _Closable(Protocol):
    async def close(self) -> None: ...


_Client = TypeVar("_Client", bound=_Closable)


class _LoopPool(Generic[_Client]):
    """The clients of one loop, and the parked generator that closes them."""

    def __init__(self) -> None:
        self.clients: dict[str, _Client] = {}  # API key -> the client using it
        self.closer = self._close_at_shutdown()

    async def _close_at_shutdown(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            clients, self.clients = list(self.clients.values()), {}
            for client in clients:
                await client.close()


class LoopClients(Generic[_Client]):
    """One SDK client per running event loop and API key, made by ``make(key)``."""

    def __init__(self, make: Callable[[str], _Client]) -> None:
        self._make = make
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPool[_Client]]
        self._pools = weakref.WeakKeyDictionary()

    async def get(self, key: str) -> _Client:
        """The running loop's client for this key, made on first use."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = _LoopPool()
            # The first step registers the generator with this loop's shutdown; it runs
            # to its first yield without suspending, so no other call can interleave.
            await anext(pool.closer)
            self._pools[loop] = pool
        client = pool.clients.get(key)
        if client is None:
            client = pool.clients[key] = self._make(key)
        return client
