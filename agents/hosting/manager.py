"""RunManager: the runs of this process, by session, and the one way a run starts.

It routes what pages, workers and the CLI ask: a message starts a run (``start_run``, the
only place runs are created) or meets the double-texting policy of the run already active
here; an action goes to the run hosted here or, over the control bus, to the process that
hosts it. It also owns the process-wide loops: control intake, liveness and the monitor feed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from channels.layers import get_channel_layer

from .. import observability
from ..models import RunKind
from ..per_loop import PerLoop
from ..profiles.cache import AgentCache
from . import db, policy, starts
from .control_bus import ControlBus, LayerUnavailable
from .layer_watch import layer_watch
from .liveness import Liveness, Reaped
from .run import FollowUp, HostedRun
from .settings import HostSettings
from .snapshot import build_snapshot, local_part
from .wire import (
    HOST_ID,
    MONITOR_GROUP,
    REAPED_SEQ,
    WORKER_CHANNEL,
    ControlReply,
    Snapshot,
    session_group,
)

log = logging.getLogger(__name__)


def _username(user: Any) -> str:
    return user.get_username() if getattr(user, "pk", None) else ""


class RunManager:
    """Hosts the runs of this process; one per event loop (see get_run_manager)."""

    def __init__(self) -> None:
        self.host_id = HOST_ID
        self.settings = HostSettings.load()
        self.layer = get_channel_layer()
        self.hosted: dict[str, HostedRun] = {}  # by session id
        self.bus = ControlBus(self.layer)
        self.agents = AgentCache()
        self.liveness = Liveness(
            self.host_id,
            self.settings,
            hosted=lambda: [h.request_id for h in self.hosted.values() if not h.finishing],
            on_reaped=self._announce_reaped,
            on_lost=self._lost,
        )
        self._background: list[asyncio.Task[None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        observability.watch_runs(self)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the control bus, start the lease, the reaper and the monitor feed."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            await self.bus.open(self._serve_control, self._rejoin)
            layer_watch(self.layer).subscribe(self._rejoin)
            self.liveness.start()
            self._background = [
                asyncio.create_task(self.bus.run(), name="zett-control"),
                asyncio.create_task(self.liveness.run(), name="zett-liveness"),
                asyncio.create_task(self._monitor_loop(), name="zett-monitor"),
            ]
            self._started = True
        await self.reap_stale_runs()

    async def close(self) -> None:
        """Cancel every hosted run and background loop, and wait for them."""
        self._closed = True
        runs = [h.task for h in self.hosted.values() if h.task is not None]
        for task in runs:
            task.cancel()
        if runs:
            await asyncio.wait(runs)
        for task in [*self._background, *self._tasks]:
            task.cancel()
        pending = [*self._background, *self._tasks]
        if pending:
            await asyncio.wait(pending)
        self.liveness.stop()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until this process hosts no runs (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self.hosted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"runs still active: {sorted(self.hosted)}")
            hosted = next(iter(self.hosted.values()))
            await asyncio.wait_for(hosted.done.wait(), remaining)
            await asyncio.sleep(0)  # let on_finished start a queued follow-up

    async def wait_for_run(self, request_id: str, timeout: float = 30.0) -> None:
        """Wait until a run hosted here has finished (returns at once if not hosted)."""
        for hosted in list(self.hosted.values()):
            if hosted.request_id == request_id:
                await asyncio.wait_for(hosted.done.wait(), timeout)

    # -- intake --------------------------------------------------------------------------

    async def submit_message(self, session_id: str, user: Any, text: str) -> ControlReply:
        """Start a run for a message, or apply the double-texting policy of the active one."""
        await self.start()
        text = text.strip()
        if not text:
            return ControlReply(False, "The message is empty.", "message")
        user_id = getattr(user, "pk", None)
        if session_id not in self.hosted:
            reply = await self.start_run(session_id, user_id, _username(user), text)
            if reply is not None:
                return reply  # a run started, or the session cannot take messages
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            reply = await policy.double_text(hosted, user_id, _username(user), text)
        else:
            reply = await self._remote(session_id, user, "message", {"text": text})
        await self._record(session_id, user, "message", {"text": text}, reply)
        return reply

    async def submit_compaction(self, session_id: str, user: Any) -> ControlReply:
        """Start a compaction run ("Compact conversation"), or meet the active run's policy."""
        await self.start()
        user_id = getattr(user, "pk", None)
        if session_id not in self.hosted:
            reply = await self.start_run(
                session_id, user_id, _username(user), "", kind=RunKind.COMPACTION
            )
            if reply is not None:
                await self._record(session_id, user, "compact", {}, reply)
                return reply
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            reply = await policy.compact_while_active(hosted, user_id, _username(user))
        else:
            reply = await self._remote(session_id, user, "compact", {})
        await self._record(session_id, user, "compact", {}, reply)
        return reply

    async def start_run(
        self,
        session_id: str,
        user_id: int | None,
        by: str,
        text: str,
        *,
        kind: str = RunKind.ANSWER,
    ) -> ControlReply | None:
        """Create the session's next run and host it here or queue it for the workers.

        The one path that creates runs (answers and compactions). None when another run
        of the session is active (the database decides); a refusing reply when the
        session cannot take messages.
        """
        workers = self.settings.run_workers
        title = policy.title_from(text) if kind == RunKind.ANSWER else None
        intake = await starts.create_run(
            session_id, user_id, text, "" if workers else self.host_id, by, title, kind
        )
        if intake == "active":
            return None
        if isinstance(intake, starts.Refused):
            return ControlReply(False, intake.reason, "message")
        if intake == "missing":
            return ControlReply(False, "No such session.", "message")
        if intake == "disabled":
            return ControlReply(False, "This agent profile is disabled.", "message")
        assert isinstance(intake, starts.Intake)
        if workers:
            await self.layer.send(
                WORKER_CHANNEL, {"type": "run.start", "request_id": intake.run.request_id}
            )
        else:
            await self._host(intake)
        action = "message" if kind == RunKind.ANSWER else "compact"
        return ControlReply(True, "", action, intake.run.request_id)

    async def host_dispatched(self, request_id: str) -> bool:
        """Claim a run a web process queued for the workers, and host it here."""
        await self.start()
        intake = await starts.claim_run(request_id, self.host_id)
        if intake is None:
            return False  # another worker took it, or the reaper gave up on it
        await self._host(intake)
        return True

    async def _host(self, intake: starts.Intake) -> HostedRun:
        hosted = HostedRun(
            intake,
            layer=self.layer,
            settings=self.settings,
            agents=self.agents,
            on_finished=self._finished,
            shutting_down=lambda: self._closed,
        )
        self.hosted[hosted.session_id] = hosted
        try:
            await self.bus.join(hosted.session_id)
        except Exception as exc:  # the layer is away: _rejoin adds it once it is back
            log.warning("could not join the control group of %s: %s", hosted.session_id, exc)
        hosted.start()
        return hosted

    def _finished(self, hosted: HostedRun, leftovers: list[FollowUp]) -> None:
        if self.hosted.get(hosted.session_id) is hosted:
            del self.hosted[hosted.session_id]
        self._spawn(self._after(hosted, leftovers), f"zett-after-{hosted.request_id}")

    async def _after(self, hosted: HostedRun, leftovers: list[FollowUp]) -> None:
        await self._send_monitor([hosted.row()])
        if hosted.sender is not None:
            # The next run's frames follow this run's last one, in every tab.
            await asyncio.wait({hosted.sender})
        if hosted.session_id not in self.hosted:
            try:
                await self.bus.leave(hosted.session_id)
            except Exception as exc:
                log.warning("could not leave the control group of %s: %s", hosted.session_id, exc)
        if leftovers and not self._closed:
            await self._start_queued(hosted.session_id, leftovers)

    async def _start_queued(self, session_id: str, queued: list[FollowUp]) -> None:
        """Start the first message that waited for the previous run; the rest wait on it.

        The rest join the new run's own queue ahead of anything sent during it, so that
        run's end starts the next: one chain per session, in the order they were sent.
        """
        first = queued[0]
        user = await db.load_user(first.user_id)
        reply = await self.start_run(
            session_id, first.user_id, _username(user), first.text, kind=first.kind
        )
        hosted = self.hosted.get(session_id)
        if reply is None:
            if hosted is not None:
                hosted.queued[:0] = queued  # a message got in first: wait behind it
                return
            log.warning("queued message for %s could not start: a run is active", session_id)
            return
        if not reply.accepted:
            log.warning("queued message for %s could not start: %s", session_id, reply.reason)
        elif hosted is not None:
            hosted.queued[:0] = queued[1:]

    # -- operator actions --------------------------------------------------------------

    async def control(
        self, session_id: str, user: Any, action: str, payload: dict[str, Any]
    ) -> ControlReply:
        """Apply an operator action (approve, deny, answer, steer, cancel, ...) to the run."""
        await self.start()
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            reply = await policy.operate(
                hosted, _username(user), getattr(user, "pk", None), action, payload
            )
        else:
            reply = await self._remote(session_id, user, action, payload)
        await self._record(session_id, user, action, payload, reply)
        return reply

    async def _record(
        self, session_id: str, user: Any, action: str, payload: dict[str, Any], reply: ControlReply
    ) -> None:
        if action == "message" and reply.accepted and reply.action == "message":
            return  # an ordinary chat message that started a run is not an operator action
        name = action if action != "message" else f"message:{reply.action or 'message'}"
        observability.operator_action(
            session_id,
            reply.request_id,
            getattr(user, "pk", None),
            name,
            reply.accepted,
            reply.reason,
        )
        await db.record_action(
            session_id,
            reply.request_id,
            getattr(user, "pk", None),
            name,
            payload,
            reply.accepted,
            reply.reason,
        )

    async def _remote(
        self, session_id: str, user: Any, action: str, payload: dict[str, Any]
    ) -> ControlReply:
        """Send an action to the process hosting the session's run and await its reply."""
        active = await db.active_run(session_id)
        if active is None:
            if action in ("message", "compact"):
                # The run finished between our checks: try to start one again.
                reply = await self.start_run(
                    session_id,
                    getattr(user, "pk", None),
                    _username(user),
                    payload.get("text", ""),
                    kind=RunKind.ANSWER if action == "message" else RunKind.COMPACTION,
                )
                if reply is not None:
                    return reply
            return ControlReply(False, "No run is active in this session.", action)
        if action == "cancel" and not active.cancel_state:
            await db.request_cancel(active.pk)
        body = {
            "action": action,
            "payload": payload,
            "user_id": getattr(user, "pk", None),
            "username": _username(user),
        }
        try:
            reply = await self.bus.ask(session_id, body, self.settings.control_timeout_seconds)
        except LayerUnavailable:
            return ControlReply(
                False,
                "Live updates are reconnecting: the process hosting this run cannot be reached "
                "right now. Try again in a moment.",
                action,
                active.request_id,
            )
        if reply is None:
            return ControlReply(
                False, "The process hosting this run did not answer.", action, active.request_id
            )
        return ControlReply.from_dict(reply, action=action, request_id=active.request_id)

    async def _serve_control(self, message: dict[str, Any]) -> dict[str, Any] | None:
        hosted = self.hosted.get(message.get("session_id", ""))
        if hosted is None:
            return None
        action = message.get("action", "")
        if action == "snapshot":
            return {"snapshot": local_part(hosted)}
        reply = await policy.operate(
            hosted,
            str(message.get("username", "")),
            message.get("user_id"),
            action,
            dict(message.get("payload") or {}),
        )
        return reply.as_dict()

    async def _rejoin(self) -> None:
        """Join the control groups of every run hosted here again (after a layer outage)."""
        for session_id in list(self.hosted):
            await self.bus.join(session_id)

    # -- snapshot --------------------------------------------------------------------------

    async def snapshot(self, session_id: str) -> Snapshot:
        """Transcript plus the answer still streaming, consistent with later live frames."""
        await self.start()
        return await build_snapshot(
            session_id,
            self.hosted.get(session_id),
            self.bus.ask,
            self.settings.snapshot_timeout_seconds,
        )

    # -- monitor feed, liveness ------------------------------------------------------------

    async def _send_monitor(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            try:
                await self.layer.group_send(MONITOR_GROUP, {"type": "monitor.rows", "rows": rows})
            except Exception as exc:
                observability.channel_send_failed("monitor")
                log.warning("could not send monitor rows: %s", exc)

    async def _monitor_loop(self) -> None:
        interval = self.settings.monitor_interval_seconds
        while True:
            await asyncio.sleep(interval)
            rows = []
            for hosted in list(self.hosted.values()):
                if hosted.projection.dirty:
                    hosted.projection.dirty = False
                    rows.append(hosted.row())
            await self._send_monitor(rows)

    async def reap_stale_runs(self) -> list[str]:
        """Mark runs whose host's lease expired as interrupted; returns their request ids."""
        return await self.liveness.reap_once()

    async def _announce_reaped(self, stale: Reaped) -> None:
        for request_id, session_id, row in stale:
            try:
                await self.layer.group_send(
                    session_group(session_id),
                    {
                        "type": "run.finished",
                        "request_id": request_id,
                        "seq": REAPED_SEQ,
                        "run": row,
                    },
                )
            except Exception as exc:
                observability.channel_send_failed("reaped")
                log.warning("could not announce reaped run %s: %s", request_id, exc)
        await self._send_monitor([row for _, _, row in stale])

    def _lost(self, request_ids: set[str]) -> None:
        for hosted in list(self.hosted.values()):
            if hosted.request_id in request_ids:
                hosted.interrupt("Interrupted: this process lost its host lease.")


# -- one manager per event loop -----------------------------------------------------------

_managers: PerLoop[RunManager] = PerLoop()


def get_run_manager() -> RunManager:
    """The RunManager of the running event loop (created on first use)."""
    return _managers.get(RunManager)
