"""WebSocket consumers: SessionConsumer (one chat) and MonitorConsumer (every run, for staff).

Both stay thin: check who is asking, validate each frame, hand actions to the RunManager and
render what the channel layer brings as htmx out-of-band fragments (agents.web.rendering).
Close codes: 4401 anonymous, 4403 not allowed (the monitor), 4404 no such session, and also
someone else's session: the chat page answers 404 there, so a socket reveals no more. The
socket is accepted before closing with those codes so the browser sees them (a refused
handshake would look like 1006, which the htmx ws extension retries forever).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from autobahn.exception import Disconnected
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from ..hosting import MONITOR_GROUP, get_run_manager, session_group
from . import queries, rendering
from .access import may_use_session
from .frames import MONITOR_FRAME_TYPES, Frame, FrameError, parse_frame

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

_session_owner = database_sync_to_async(queries.session_owner)
_monitor_runs = database_sync_to_async(queries.monitor_runs)


# Messages whose handlers need no connection clean-up first: group frames only render what
# they carry, and a browser frame's handler reaches the database only through helpers that
# clean up themselves (database_sync_to_async, the RunManager's ORM calls).
_RENDER_ONLY_PREFIXES = ("run.", "monitor.", "websocket.receive")


class _GroupConsumer(AsyncWebsocketConsumer):
    """Joins its groups, and re-joins them well before the layer's group_expiry drops it."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler, a hop to the
        # one ORM thread; for every streamed frame to every socket that queued rendering
        # behind the run's writes. These handlers skip it.
        if message["type"].startswith(_RENDER_ONLY_PREFIXES):
            handler = getattr(self, message["type"].replace(".", "_"), None)
            if handler is not None:
                await handler(message)
                return
        await super().dispatch(message)

    def groups_to_join(self) -> list[str]:
        return []

    async def join(self) -> None:
        self.joined = self.groups_to_join()
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        expiry = float(getattr(self.channel_layer, "group_expiry", 86400) or 86400)
        self.refresher = asyncio.create_task(self._refresh(max(1.0, expiry / 3)))

    async def _refresh(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            for group in self.joined:
                try:
                    await self.channel_layer.group_add(group, self.channel_name)
                except Exception:
                    log.exception("could not refresh membership of %s", group)

    async def disconnect(self, code: int) -> None:
        refresher = getattr(self, "refresher", None)
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        """Send one frame; to a client that is already gone it is dropped, silently.

        Daphne refuses sends once the closing handshake has begun (autobahn's Disconnected)
        but tells the consumer only when the TCP connection is gone, so frames in between are
        expected; the websocket.disconnect that follows does the clean-up.
        """
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
        except Disconnected:
            pass

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def send_error(self, error: FrameError) -> None:
        await self.send(text_data=rendering.error(error.code, error.detail))

    async def act(self, session_id: str, frame: Frame) -> None:
        user = self.scope["user"]
        manager = get_run_manager()
        if frame.type == "message":
            reply = await manager.submit_message(session_id, user, frame.payload["text"])
        else:
            reply = await manager.control(session_id, user, frame.type, dict(frame.payload))
        await self.send(
            text_data=rendering.reply(reply.action or frame.type, reply.accepted, reply.reason)
        )


class SessionConsumer(_GroupConsumer):
    """One chat session: the snapshot on connect, then live frames without gaps or repeats."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.session_id = str(self.scope["url_route"]["kwargs"]["session_id"])
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED)
        exists, owner_id = await _session_owner(self.session_id)
        if not exists:
            return await self.refuse(CLOSE_NOT_FOUND)
        if not may_use_session(user, owner_id):
            return await self.refuse(CLOSE_NOT_FOUND)
        await self.accept()
        # Join first, then snapshot: frames published meanwhile wait in our channel and are
        # filtered against the snapshot, so nothing falls between the two.
        await self.join()
        snap = await get_run_manager().snapshot(self.session_id)
        self.covered: dict[str, int] = {}  # request id -> last seq the snapshot contains
        self.seen_ids: set[str] = set(snap.get("message_ids") or ())
        self.streaming: dict[str, int] = {}  # request id -> iteration of its open bubble
        run = snap.get("run")
        active_id = run["request_id"] if run else None
        # Model calls of the active run whose answers the transcript already shows.
        self.persisted_iterations: dict[str, int] = {}
        if active_id:
            self.covered[active_id] = int(snap.get("seq") or 0)
            self.persisted_iterations[active_id] = int(snap.get("persisted_iterations") or 0)
        # Runs whose messages are already persisted and that are not active are over: any of
        # their frames still queued for us would only repeat what the snapshot shows.
        self.settled = {
            m["request_id"] for m in snap.get("messages") or [] if m.get("request_id")
        } - {active_id}
        partial = snap.get("partial")
        if partial:
            self.streaming[str(partial["request_id"])] = int(partial.get("iteration") or 0)
        await self.send(text_data=rendering.snapshot(self.session_id, snap))

    def groups_to_join(self) -> list[str]:
        return [session_group(self.session_id)]

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            frame = parse_frame(text_data if text_data is not None else bytes_data)
        except FrameError as error:
            return await self.send_error(error)
        await self.act(self.session_id, frame)

    # -- live frames from the session group -------------------------------------------

    def _fresh(self, event: dict[str, Any]) -> bool:
        request_id = event.get("request_id")
        if request_id in self.settled:
            return False
        covered = self.covered.get(request_id)
        return covered is None or int(event.get("seq") or 0) > covered

    def _open_stream(self, request_id: str, iteration: int) -> str:
        if self.streaming.get(request_id) == iteration:
            return ""
        html = ""
        if request_id in self.streaming:
            html = rendering.stream_close(request_id, self.streaming[request_id])
        self.streaming[request_id] = iteration
        return html + rendering.stream_open(request_id, iteration)

    def _close_stream(self, request_id: str) -> str:
        if request_id not in self.streaming:
            return ""
        return rendering.stream_close(request_id, self.streaming.pop(request_id))

    async def _status(self, event: dict[str, Any], extra: str = "") -> None:
        row = event.get("run")
        await self.send(
            text_data=extra
            + rendering.run_status(self.session_id, row, oob=True)
            + rendering.waiting(self.session_id, row, oob=True)
        )

    async def run_started(self, event: dict[str, Any]) -> None:
        if not self._fresh(event):
            return
        message = event.get("message") or {}
        html = ""
        if message.get("id") and message["id"] not in self.seen_ids:
            self.seen_ids.add(message["id"])
            html = rendering.append_message(message)
        await self._status(event, html)

    def _persisted(self, event: dict[str, Any]) -> bool:
        done = self.persisted_iterations.get(event.get("request_id", ""), 0)
        return int(event.get("iteration") or 0) <= done

    async def run_model_started(self, event: dict[str, Any]) -> None:
        if self._fresh(event) and not self._persisted(event):
            html = self._open_stream(event["request_id"], int(event.get("iteration") or 0))
            if html:
                await self.send(text_data=html)

    async def run_delta(self, event: dict[str, Any]) -> None:
        if not self._fresh(event) or self._persisted(event):
            return
        request_id, iteration = event["request_id"], int(event.get("iteration") or 0)
        html = self._open_stream(request_id, iteration)
        html += rendering.delta(request_id, iteration, event.get("kind", "text"), event["text"])
        await self.send(text_data=html)

    async def run_message(self, event: dict[str, Any]) -> None:
        message = event.get("message") or {}
        if not self._fresh(event) or message.get("id") in self.seen_ids:
            return
        self.seen_ids.add(message.get("id"))
        html = ""
        if message.get("role") == "assistant":
            html = self._close_stream(event["request_id"])
        await self.send(text_data=html + rendering.append_message(message))

    async def run_tool(self, event: dict[str, Any]) -> None:
        call = event.get("call")
        if not self._fresh(event) or not call:
            return
        result = event.get("result")
        if result and result.get("id"):
            self.seen_ids.add(result["id"])
        await self.send(text_data=rendering.tool_update(call, event.get("status", ""), result))

    async def run_custom(self, event: dict[str, Any]) -> None:
        """Approvals and questions reach the page through run.state's waiting_for."""

    async def run_state(self, event: dict[str, Any]) -> None:
        if self._fresh(event):
            await self._status(event)

    async def run_finished(self, event: dict[str, Any]) -> None:
        if not self._fresh(event):
            return
        request_id = event.get("request_id", "")
        self.settled.add(request_id)
        await self._status(event, self._close_stream(request_id))


class MonitorConsumer(_GroupConsumer):
    """Every active run and the recently finished ones, live; staff answer waits from here."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED)
        if not user.is_staff:
            return await self.refuse(CLOSE_FORBIDDEN)
        await self.accept()
        await self.join()
        active, recent = await _monitor_runs()
        self.active_ids = {row["request_id"] for row in active}
        self.finished_ids = {row["request_id"] for row in recent}
        await self.send(text_data=rendering.monitor_tables(active, recent))

    def groups_to_join(self) -> list[str]:
        return [MONITOR_GROUP]

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            frame = parse_frame(
                text_data if text_data is not None else bytes_data,
                allowed=MONITOR_FRAME_TYPES,
                needs_session=True,
            )
        except FrameError as error:
            return await self.send_error(error)
        exists, _ = await _session_owner(frame.session_id)
        if not exists:
            return await self.send_error(FrameError("invalid", "No such session."))
        await self.act(frame.session_id, frame)

    async def monitor_rows(self, event: dict[str, Any]) -> None:
        frames: list[str] = []
        for row in event.get("rows") or []:
            request_id = row.get("request_id")
            if row.get("status") in rendering.TERMINAL_STATUSES:
                self.active_ids.discard(request_id)
                self.finished_ids.add(request_id)
                frames += rendering.monitor_update(row, shown_active=False)
            elif request_id not in self.finished_ids:  # else: a late update of a finished run
                frames += rendering.monitor_update(row, shown_active=request_id in self.active_ids)
                self.active_ids.add(request_id)
        for frame in frames:
            await self.send(text_data=frame)


__all__ = ["MonitorConsumer", "SessionConsumer"]
