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

from .. import observability
from ..hosting import MONITOR_GROUP, REAPED_SEQ, get_run_manager, layer_watch, session_group
from . import queries, rendering, revocation
from .access import may_use_session
from .frames import MONITOR_FRAME_TYPES, Frame, FrameError, parse_frame
from .live import LiveFilter

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

_session_owner = database_sync_to_async(queries.session_owner)
_monitor_runs = database_sync_to_async(queries.monitor_runs)
_run_row = database_sync_to_async(queries.run_row_by_request)
_latest_run_row = database_sync_to_async(queries.latest_run_row)

#: Replies that stop applying when the run ends: cleared then, or (cancel) said in the past.
_TRANSIENT_REPLIES = frozenset({"steer", "queue", "interrupt", "reject", "cancel"})


# Messages whose handlers need no connection clean-up first: group frames only render what
# they carry, and a browser frame's handler reaches the database only through helpers that
# clean up themselves (database_sync_to_async, the RunManager's ORM calls).
_RENDER_ONLY_PREFIXES = ("run.", "monitor.", "websocket.receive")


class _GroupConsumer(AsyncWebsocketConsumer):
    """Joins its groups, and re-joins them well before the layer's group_expiry drops it.

    The channel layer may go away (Redis restarting): receiving from it then fails, and
    channels would end the consumer and close the socket with 1011. Instead the socket
    stays open, the page is told that live updates are reconnecting, and when the layer
    is back (the process's LayerWatch says so) the consumer re-joins its groups and
    refreshes the page (``layer_back``).
    """

    layer_ok = True

    @property
    def channel_receive(self) -> Any:
        return self._receive_resiliently

    @channel_receive.setter
    def channel_receive(self, receive: Any) -> None:
        self._raw_receive = receive

    async def _receive_resiliently(self) -> dict[str, Any]:
        delay = 0.1
        while True:
            try:
                return await self._raw_receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.layer_ok:
                    log.warning("live updates of a socket paused: %s", exc)
                    self.layer_ok = False
                    await self.layer_lost()
                    await layer_watch(self.channel_layer).reported_failure()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def layer_lost(self) -> None:
        """The layer failed under this socket: tell the page (subclasses)."""

    async def layer_back(self) -> None:
        """The layer is back and the groups are joined again: refresh the page (subclasses)."""

    async def _on_layer_back(self) -> None:
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_add(group, self.channel_name)
        self.layer_ok = True
        await self.layer_back()

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
        """The revocation groups; subclasses add theirs."""
        return revocation.groups_for(self.scope)

    async def auth_revoked(self, event: dict[str, Any]) -> None:
        """The user logged out, changed their password or was deactivated: close as 4401."""
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def join(self) -> None:
        self.joined = self.groups_to_join()
        layer_watch(self.channel_layer).subscribe(self._on_layer_back)
        try:
            for group in self.joined:
                await self.channel_layer.group_add(group, self.channel_name)
        except Exception as exc:  # the layer is away: the watch calls _on_layer_back later
            log.warning("could not join %s: %s", self.joined, exc)
            self.layer_ok = False
            await layer_watch(self.channel_layer).reported_failure()
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
        observability.socket_closed(self)
        layer_watch(self.channel_layer).unsubscribe(self._on_layer_back)
        refresher = getattr(self, "refresher", None)
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        for group in getattr(self, "joined", []):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as exc:  # the layer is away; the membership expires there
                log.warning("could not leave %s: %s", group, exc)

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
        elif frame.type == "compact":
            reply = await manager.submit_compaction(session_id, user)
        else:
            reply = await manager.control(session_id, user, frame.type, dict(frame.payload))
        action = reply.action or frame.type
        self.last_reply = (action, reply.accepted)
        text = str(frame.payload.get("text", ""))
        await self.send(text_data=rendering.reply(action, reply.accepted, reply.reason, text))

    last_reply: tuple[str, bool] | None = None

    def reply_after_run(self) -> str:
        """What replaces a reply that stopped applying when the run ended ("" for none)."""
        last, self.last_reply = self.last_reply, None
        if last is None or last[0] not in _TRANSIENT_REPLIES:
            return ""
        if last == ("cancel", True):
            return rendering.reply("cancel", True, "", headline="The run has stopped.")
        return rendering.clear_reply()


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
        self.tool_results: set[str] = set()  # calls whose result this socket has shown
        await self.accept()
        observability.socket_opened(self, "session")
        # Join first, then snapshot: frames published meanwhile wait in our channel and are
        # filtered against the snapshot, so nothing falls between the two.
        await self.join()
        await self.resnapshot()

    async def resnapshot(self, following: str | None = None) -> None:
        """Replace the page's transcript and status with a fresh snapshot, and follow it.

        ``following``: the run the page was following; if it ended meanwhile, the page
        also gets its final status (a snapshot shows only an active run's).
        """
        snap = await get_run_manager().snapshot(self.session_id)
        snap.live = snap.live and self.layer_ok
        self.live = LiveFilter(snap)
        self.awaiting = rendering.approval_calls(snap.run)
        last = await _latest_run_row(self.session_id) if snap.run is None else None
        frames = rendering.snapshot_frames(self.session_id, snap, last)
        if following and (snap.run is None or snap.run["request_id"] != following):
            row = await _run_row(following)
            if row is not None:
                frames[-1] += rendering.run_status(row, oob=True)
        for frame in frames:
            await self.send(text_data=frame)

    def groups_to_join(self) -> list[str]:
        return [*super().groups_to_join(), session_group(self.session_id)]

    async def layer_lost(self) -> None:
        if getattr(self, "live", None) is not None:  # else the snapshot to come says so
            await self.send(text_data=rendering.live_state(False))

    async def layer_back(self) -> None:
        await self.resnapshot()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            frame = parse_frame(text_data if text_data is not None else bytes_data)
        except FrameError as error:
            return await self.send_error(error)
        await self.act(self.session_id, frame)

    # -- live frames from the session group: the LiveFilter decides, rendering draws ---------

    awaiting: dict[str, dict[str, Any]] = {}  # tool calls shown as awaiting approval

    async def _status(self, event: dict[str, Any], extra: str = "") -> None:
        row = event.get("run")
        await self.send(
            text_data=extra
            + self._approval_cards(row)
            + rendering.run_status(row, oob=True)
            + rendering.waiting(self.session_id, row, oob=True)
        )

    def _approval_cards(self, row: dict[str, Any] | None) -> str:
        """Tool cards that began or stopped awaiting approval (a decided one runs, or ended)."""
        now = rendering.approval_calls(row)
        html = "".join(
            rendering.tool_update(call, "awaiting", None)
            for call_id, call in now.items()
            if call_id not in self.awaiting
        )
        html += "".join(
            rendering.tool_update(call, "started", None)
            for call_id, call in self.awaiting.items()
            if call_id not in now and call_id not in self.tool_results
        )
        self.awaiting = now
        return html

    async def run_started(self, event: dict[str, Any]) -> None:
        if not self.live.fresh(event):
            return
        message = event.get("message") or {}
        html = rendering.append_message(message) if self.live.first_sight(message) else ""
        await self._status(event, html)

    async def run_model_started(self, event: dict[str, Any]) -> None:
        if self.live.fresh(event) and not self.live.persisted(event):
            html = self._open(event["request_id"], int(event.get("iteration") or 0))
            if html:
                await self.send(text_data=html)

    def _open(self, request_id: str, iteration: int) -> str:
        opened = self.live.open_stream(request_id, iteration)
        if opened is None:
            return ""
        closed, _ = opened
        html = rendering.stream_close(request_id, closed) if closed is not None else ""
        return html + rendering.stream_open(request_id, iteration)

    async def run_delta(self, event: dict[str, Any]) -> None:
        if not self.live.fresh(event) or self.live.persisted(event):
            return
        request_id, iteration = event["request_id"], int(event.get("iteration") or 0)
        kind = event.get("kind", "text")
        text = self.live.delta_text(request_id, iteration, kind, event)
        if text is None:  # a gap: a delta frame was lost on the way
            log.info("a delta of run %s was lost; sending a fresh snapshot", request_id)
            await self.resnapshot(request_id)
            return
        html = self._open(request_id, iteration)
        if text:
            html += rendering.delta(request_id, iteration, kind, text)
        if html:
            await self.send(text_data=html)

    async def run_message(self, event: dict[str, Any]) -> None:
        message = event.get("message") or {}
        if not self.live.fresh(event) or not self.live.first_sight(message):
            return
        html = ""
        if message.get("role") == "assistant":
            closed = self.live.close_stream(event["request_id"])
            if closed is not None:
                html = rendering.stream_close(event["request_id"], closed)
        await self.send(text_data=html + rendering.append_message(message))

    async def run_tool(self, event: dict[str, Any]) -> None:
        call = event.get("call")
        if not self.live.fresh(event) or not call:
            return
        result = event.get("result")
        if result:
            self.live.first_sight(result)
            self.tool_results.add(str(call.get("id")))
        status = event.get("status", "")
        if status == "started" and str(call.get("id")) in self.awaiting:
            status = "awaiting"  # the approval wait opened before the tool was reported
        await self.send(text_data=rendering.tool_update(call, status, result))

    async def run_compacted(self, event: dict[str, Any]) -> None:
        """A compaction finished: its divider goes below the messages it summarised."""
        divider = event.get("divider") or {}
        if self.live.fresh(event) and self.live.first_sight(divider):
            await self.send(text_data=rendering.insert_divider(divider))

    async def run_custom(self, event: dict[str, Any]) -> None:
        """Approvals and questions reach the page through run.state's waiting_for."""

    async def run_state(self, event: dict[str, Any]) -> None:
        if self.live.fresh(event):
            await self._status(event)

    async def run_finished(self, event: dict[str, Any]) -> None:
        if not self.live.fresh(event):
            return
        request_id = event.get("request_id", "")
        closed = self.live.finish(request_id)
        html = rendering.stream_close(request_id, closed) if closed is not None else ""
        if event.get("seq") == REAPED_SEQ:
            # Reaped elsewhere: the transcript now holds its partial answer and a notice.
            await self.resnapshot()
            self.live.settled.add(request_id)
            html = ""
        for message in (event.get("partial"), event.get("notice")):
            if message and self.live.first_sight(message):
                html += rendering.append_message(message)
        row = event.get("run") or {}
        usage = row.get("usage") or {}
        if row.get("status") == "completed" and usage.get("label"):
            # run.finished follows the run's last message: the line lands under the answer.
            html += rendering.answer_usage(request_id, usage["label"])
        await self._status(event, html + self.reply_after_run())


class MonitorConsumer(_GroupConsumer):
    """Every active run and the recently finished ones, live; staff answer waits from here."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED)
        if not user.is_staff:
            return await self.refuse(CLOSE_FORBIDDEN)
        await self.accept()
        observability.socket_opened(self, "monitor")
        await self.join()
        await self._tables()

    def groups_to_join(self) -> list[str]:
        return [*super().groups_to_join(), MONITOR_GROUP]

    async def layer_back(self) -> None:
        await self._tables()

    async def _tables(self) -> None:
        """Both tables and the totals, from the database: on connect and after an outage."""
        active, recent = await _monitor_runs()
        # The active rows as last shown, by request id: what the totals line adds up.
        self.active_rows = {row["request_id"]: row for row in active}
        self.finished_ids = {row["request_id"] for row in recent}
        self.totals_shown = rendering.monitor_totals(active)
        for frame in rendering.monitor_tables(active, recent, self.totals_shown):
            await self.send(text_data=frame)

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
        """A tick's changed rows in few frames (each within MAX_FRAME_BYTES): the <tr>s
        replaced or deleted in place, then the <tbody>s that add rows, with the totals'
        <tfoot>. A row's frames keep their order (its delete from the active table before
        its add to the recent)."""
        rows: list[str] = []
        sections: list[str] = []
        for row in event.get("rows") or []:
            request_id = row.get("request_id")
            if row.get("status") in rendering.TERMINAL_STATUSES:
                self.active_rows.pop(request_id, None)
                self.finished_ids.add(request_id)
                frames = rendering.monitor_update(row, shown_active=False)
            elif request_id not in self.finished_ids:  # else: a late update of a finished run
                frames = rendering.monitor_update(row, shown_active=request_id in self.active_rows)
                self.active_rows[request_id] = row
            else:
                continue
            for frame in frames:
                (sections if frame.startswith("<tbody") else rows).append(frame)
        totals = rendering.monitor_totals(self.active_rows.values())
        if totals != self.totals_shown:
            self.totals_shown = totals
            sections.append(totals)
        for frame in [*rendering.frames_of(rows), *rendering.frames_of(sections)]:
            await self.send(text_data=frame)


__all__ = ["MonitorConsumer", "SessionConsumer"]
