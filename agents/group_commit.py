"""Group commit: the writes of one kind waiting at one moment share one database hop.

Every ORM call of the process runs on one thread, so a burst of 200 run starts used to be
200 hops, each paying its own queries, transaction and thread handoff while the others
queued behind it. A ``GroupCommit`` writes the first request at once; the requests that
arrive while that hop runs wait for it and then go together in the next hop, and so on.
No request waits for a timer, and a request alone is still one hop. Run starts
(agents.hosting.starts), checkpoints, partial answers and final records (agents.hosting.db)
and the session store's message rows (agents.session_store) use it;
``each_alone_if_whole_fails`` keeps one bad request of a batch from failing the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .db_retry import RETRYABLE

Request = TypeVar("Request")
Result = TypeVar("Result")

#: The most requests one hop takes (the rest go in the next): keeps a transaction short.
MAX_BATCH = 256


def each_alone_if_whole_fails(
    write_together: Callable[[list[Request]], Sequence[Result | Exception]],
    requests: list[Request],
) -> list[Result | Exception]:
    """``write_together(requests)``; if the whole fails, each request written on its own.

    A connection error propagates (nothing was committed; the hop retries the batch). Any
    other failure of the whole (a constraint checked at commit, a bad record) sends each
    request on alone, so only the request at fault gets the exception.
    """
    try:
        return list(write_together(requests))
    except RETRYABLE:
        raise
    except Exception as exc:
        if len(requests) == 1:
            return [exc]
        return [
            result
            for request in requests
            for result in each_alone_if_whole_fails(write_together, [request])
        ]


class GroupCommit(Generic[Request, Result]):
    """Hands waiting requests to ``write_all`` together; each caller gets its own result.

    ``write_all`` takes a list of requests and returns one entry per request, in order: a
    result, or an exception that only that request's caller sees. If ``write_all`` itself
    raises, every caller of that batch gets the error (nothing of the batch was written).
    One batcher belongs to one event loop (see PerLoop).
    """

    def __init__(self, write_all: Callable[[list[Request]], Awaitable[list[Result | Exception]]]):
        self._write_all = write_all
        self._waiting: list[tuple[Request, asyncio.Future[Result]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, request: Request) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="zett-start-batch")
        # A cancelled caller does not cancel the batch: its start is written (or not) with
        # the others, as a hop already on the ORM thread would have been.
        return await asyncio.shield(future)

    async def _write(self) -> None:
        batch: list[tuple[Request, asyncio.Future[Result]]] = []
        try:
            while self._waiting:
                batch = self._waiting[:MAX_BATCH]
                del self._waiting[:MAX_BATCH]
                try:
                    results = await self._write_all([request for request, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        except asyncio.CancelledError:  # the loop is shutting down: nobody is left to answer
            for _, future in [*batch, *self._waiting]:
                future.cancel()
            self._waiting.clear()
            raise
        finally:
            self._writer = None
