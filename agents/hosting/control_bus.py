"""ControlBus: ask the process hosting a session's run, and answer such questions.

A request goes to the group ``control.<session_id>``, which only the hosting process joins;
the reply comes back on the asker's own channel. The bus knows no runs: the manager hands
it the handler. After the channel layer failed (Redis restarted and forgot every group),
the bus calls ``on_recovered`` so the manager re-joins the control groups of its runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .wire import control_group

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


class LayerUnavailable(ConnectionError):
    """The channel layer could not carry a control request (Redis away)."""


class ControlBus:
    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.channel: str | None = None
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handler: Handler | None = None
        self._on_recovered: Callable[[], Awaitable[None]] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def open(
        self, handler: Handler, on_recovered: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        # The default prefix on purpose: channels-redis serves all of a process's local
        # channels through one receive loop per prefix, and a second prefix would let the
        # control loop starve every socket of this process while it waits.
        self.channel = await self.layer.new_channel()
        self._handler = handler
        self._on_recovered = on_recovered

    async def join(self, session_id: str) -> None:
        assert self.channel is not None
        await self.layer.group_add(control_group(session_id), self.channel)

    async def leave(self, session_id: str) -> None:
        if self.channel is not None:
            await self.layer.group_discard(control_group(session_id), self.channel)

    async def ask(
        self, session_id: str, body: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        """The hosting process's reply, or None when none came within ``timeout``.

        Raises LayerUnavailable when the request could not even be sent.
        """
        correlation = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[correlation] = future
        try:
            try:
                await self.layer.group_send(
                    control_group(session_id),
                    {
                        "type": "control.request",
                        "session_id": session_id,
                        "reply_to": self.channel,
                        "correlation": correlation,
                        **body,
                    },
                )
            except Exception as exc:  # the layer is away: nobody can be asked
                raise LayerUnavailable(str(exc)) from exc
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._replies.pop(correlation, None)

    async def run(self) -> None:
        """Receive replies and requests for the life of the process, across layer outages."""
        assert self.channel is not None
        failing = False
        delay = 0.1
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A layer hiccup (Redis restarting, a timeout) must not end control intake.
                if not failing:
                    log.warning("control intake failed (%s); retrying", exc)
                failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                if await self._probe():
                    failing = False
                    delay = 0.1
                    await self._recovered()
                continue
            if failing:
                failing = False
                await self._recovered()
            kind = message.get("type")
            if kind == "control.reply":
                future = self._replies.get(message.get("correlation", ""))
                if future is not None and not future.done():
                    future.set_result(message)
            elif kind == "control.request":
                task = asyncio.create_task(self._serve(message), name="zett-control-request")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _probe(self) -> bool:
        try:
            await self.layer.group_add("zett.probe", self.channel)
            await self.layer.group_discard("zett.probe", self.channel)
        except Exception:
            return False
        return True

    async def _recovered(self) -> None:
        log.info("channel layer reachable again; re-joining control groups")
        if self._on_recovered is not None:
            try:
                await self._on_recovered()
            except Exception:
                log.exception("could not re-join control groups")

    async def _serve(self, message: dict[str, Any]) -> None:
        assert self._handler is not None
        body = await self._handler(message)
        if body is None:
            return  # not ours (a stale group membership): the real host answers
        try:
            await self.layer.send(
                message["reply_to"],
                {"type": "control.reply", "correlation": message.get("correlation"), **body},
            )
        except Exception as exc:
            log.warning("could not answer a control request: %s", exc)
