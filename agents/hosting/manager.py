"""RunManager: hosts runs in this server process and turns their events into rows and frames.

A run lives here, not in the consumer that asked for it: closing a tab never
stops a run. For every outward AgentEvent the manager updates the Run row and
its RunEvent trace, and sends frames to the channel-layer groups
``session.<id>`` (every tab of that chat) and ``monitor`` (coalesced rows).
Browser input for a run arrives as a ``control.request`` on the group
``control.<session_id>``, which only the hosting process joins; the host turns
it into ``agent.emit_external_event``, steering or cancellation and replies
accepted or rejected with a reason.

Frames sent to ``session.<id>`` (each with ``request_id`` and ``seq``, the
run's outward seq, the last one covered for coalesced deltas):
``run.started`` {run, message}, ``run.model_started`` {iteration},
``run.delta`` {kind, text, first_seq, iteration}, ``run.message`` {message},
``run.tool`` {status, call, result}, ``run.custom`` {name, data},
``run.state`` {run}, ``run.finished`` {run}. Frames sent to ``monitor``:
``monitor.rows`` {rows}.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections import deque
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.utils import timezone

from ..models import (
    CancelState,
    ChatSession,
    Message,
    OperatorAction,
    Run,
    RunEvent,
    RunStatus,
    SessionStatus,
)
from ..profiles.catalog import ProfileConfigError, build_agent_for_profile
from ..providers.errors import ProviderError
from ..runtime import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentRunConfig,
    AssistantMessage,
    ExternalEvent,
    ToolMessage,
    UserMessage,
)
from ..runtime.context import AgentRunContext
from .payloads import call_dict, message_dict, run_row

log = logging.getLogger(__name__)

_ET = AgentEventType
HOST_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

MONITOR_GROUP = "monitor"
WORKER_CHANNEL = "zett-runs"  # runworker processes consume new runs from here
TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INTERRUPTED)


def session_group(session_id: str) -> str:
    return f"session.{session_id}"


def control_group(session_id: str) -> str:
    return f"control.{session_id}"


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


@dataclass(frozen=True, slots=True)
class ControlReply:
    """The explicit answer to one browser action."""

    accepted: bool
    reason: str = ""
    action: str = ""
    request_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "action": self.action,
            "request_id": self.request_id,
        }


class _Outbox:
    """Frames of one run to its session group, sent in order by one sender task.

    Text deltas merge into the last unsent delta frame, so a burst of tokens
    becomes one frame per batch window; ``seal`` stops merging into frames that
    a snapshot has already covered.
    """

    __slots__ = ("items", "wake", "sealed_seq")

    def __init__(self) -> None:
        self.items: deque[dict[str, Any]] = deque()
        self.wake = asyncio.Event()
        self.sealed_seq = 0

    def push(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "run.delta" and self.items:
            tail = self.items[-1]
            if (
                tail["type"] == "run.delta"
                and tail["kind"] == frame["kind"]
                and tail["iteration"] == frame["iteration"]
                and tail["seq"] > self.sealed_seq
            ):
                tail["text"] += frame["text"]
                tail["seq"] = frame["seq"]
                return
        self.items.append(frame)
        self.wake.set()

    def seal(self, seq: int) -> None:
        self.sealed_seq = seq


@dataclass(eq=False)
class HostedRun:
    """What the host keeps in memory for one run it is executing."""

    run: Run
    session_id: str
    request_id: str
    owner: str
    owner_id: int
    profile_name: str
    title: str
    double_texting: str
    text: str
    agent: Agent | None = None
    context: AgentRunContext | None = None
    task: asyncio.Task[None] | None = None
    sender: asyncio.Task[None] | None = None
    outbox: _Outbox = field(default_factory=_Outbox)
    seq: int = 0  # last outward seq handled
    input_message: dict[str, Any] | None = None  # run.started's message, until it is stored
    iteration: int = 0
    partial_text: list[str] = field(default_factory=list)
    partial_reasoning: list[str] = field(default_factory=list)
    trace: list[RunEvent] = field(default_factory=list)  # not yet written
    pending_delta: RunEvent | None = None  # the coalesced delta entry being built
    pending_parts: list[str] = field(default_factory=list)  # its deltas, joined at flush
    queued: list[tuple[int | None, str]] = field(default_factory=list)  # (user id, text)
    tool_started: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    dirty: bool = True  # the monitor row changed since the last tick
    interrupted: bool = False  # another process reaped it: it ends as interrupted

    def row(self) -> dict[str, Any]:
        return run_row(self.run, owner=self.owner, profile=self.profile_name, title=self.title)


class RunManager:
    """Hosts the runs of this process; one per event loop (see get_run_manager)."""

    def __init__(self) -> None:
        self.host_id = HOST_ID
        self.layer = get_channel_layer()
        self.hosted: dict[str, HostedRun] = {}  # by session id
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._control_channel: str | None = None
        self._replies: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._started = False
        self._closed = False
        self._agent_cache: dict[int, tuple[str, Agent]] = {}

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background loops (control intake, heartbeats, reaper, monitor)."""
        if self._started:
            return
        self._started = True
        # The default prefix on purpose: channels-redis serves all of a process's local
        # channels through one receive loop per prefix, and a second prefix would let the
        # control loop starve every socket of this process while it waits.
        self._control_channel = await self.layer.new_channel()
        self._background = [
            asyncio.create_task(self._control_loop(), name="zett-control"),
            asyncio.create_task(self._heartbeat_loop(), name="zett-heartbeat"),
            asyncio.create_task(self._monitor_loop(), name="zett-monitor"),
        ]
        await self.reap_stale_runs()

    async def close(self) -> None:
        """Cancel every hosted run and background loop, and wait for them."""
        self._closed = True
        for hosted in list(self.hosted.values()):
            if hosted.task is not None:
                hosted.task.cancel()
        pending = [h.task for h in self.hosted.values() if h.task is not None]
        if pending:
            await asyncio.wait(pending)
        for task in self._background:
            task.cancel()
        if self._background:
            await asyncio.wait(self._background)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))

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

    async def wait_for_run(self, request_id: str, timeout: float = 30.0) -> None:
        """Wait until a run hosted here has finished (returns at once if not hosted)."""
        for hosted in list(self.hosted.values()):
            if hosted.request_id == request_id:
                await asyncio.wait_for(hosted.done.wait(), timeout)

    # -- intake: new messages -----------------------------------------------------------

    async def submit_message(self, session_id: str, user: Any, text: str) -> ControlReply:
        """Start a run for a message, or apply the profile's double-texting policy."""
        await self.start()
        text = text.strip()
        if not text:
            return ControlReply(False, "The message is empty.", "message")
        session = await _load_session(session_id)
        if session is None:
            return ControlReply(False, "No such session.", "message")
        if not session.profile.is_active:
            return ControlReply(False, "This agent profile is disabled.", "message")
        hosted = self.hosted.get(session_id)
        if hosted is None:
            run = await self._create_and_dispatch(session, user, text)
            if run is not None:
                return ControlReply(True, "", "message", run.request_id)
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            reply = await self._double_text(hosted, getattr(user, "pk", None), text)
        else:
            reply = await self._remote(session_id, user, "message", {"text": text})
        await _record_action(session_id, reply.request_id, user, "message", {"text": text}, reply)
        return reply

    async def _double_text(self, hosted: HostedRun, user_id: int | None, text: str) -> ControlReply:
        policy = hosted.double_texting
        request_id = hosted.request_id
        if policy == "reject":
            return ControlReply(
                False,
                "A run is still active in this session: wait for it to finish or cancel it.",
                "reject",
                request_id,
            )
        if policy == "steer":
            if self._steer(hosted, user_id, text):
                return ControlReply(
                    True, "Sent to the running agent as steering.", "steer", request_id
                )
            hosted.queued.append((user_id, text))
            return ControlReply(
                True, "The run is finishing; your message starts the next run.", "queue", request_id
            )
        if policy == "interrupt":
            hosted.queued.append((user_id, text))
            await self._cancel(hosted)
            return ControlReply(
                True,
                "Cancelling the active run; your message starts next.",
                "interrupt",
                request_id,
            )
        hosted.queued.append((user_id, text))
        return ControlReply(True, "Queued until the active run finishes.", "queue", request_id)

    def _steer(self, hosted: HostedRun, user_id: int | None, text: str) -> bool:
        if hosted.agent is None:
            return False
        accepted = hosted.agent.emit_external_event(
            ExternalEvent(
                "steer",
                {"text": text, "by": hosted.owner if user_id == hosted.owner_id else str(user_id)},
            ),
            config=AgentRunConfig(session_id=hosted.session_id, request_id=hosted.request_id),
        )
        return bool(accepted)

    # -- intake: operator actions ------------------------------------------------------

    async def control(
        self, session_id: str, user: Any, action: str, payload: dict[str, Any]
    ) -> ControlReply:
        """Apply an operator action (approve, deny, answer, steer, cancel) to the active run."""
        await self.start()
        hosted = self.hosted.get(session_id)
        if hosted is not None:
            reply = await self._apply(
                hosted, _username(user), getattr(user, "pk", None), action, payload
            )
        else:
            reply = await self._remote(session_id, user, action, payload)
        await _record_action(session_id, reply.request_id, user, action, payload, reply)
        return reply

    async def _apply(
        self,
        hosted: HostedRun,
        username: str,
        user_id: int | None,
        action: str,
        payload: dict[str, Any],
    ) -> ControlReply:
        request_id = hosted.request_id
        if hosted.done.is_set():
            return ControlReply(False, "The run has finished.", action, request_id)
        if action == "message":
            return await self._double_text(hosted, user_id, str(payload.get("text", "")))
        if action == "cancel":
            if hosted.run.cancel_state:
                return ControlReply(False, "Cancel was already requested.", action, request_id)
            await self._cancel(hosted)
            return ControlReply(True, "Cancelling.", action, request_id)
        if hosted.agent is None:
            # Queued: the agent is still being built, so nothing can be waiting for an answer.
            return ControlReply(
                False, "The run is still starting: nothing is waiting yet.", action, request_id
            )
        if action == "steer":
            if self._steer(hosted, user_id, str(payload.get("text", ""))):
                return ControlReply(True, "Steering sent.", action, request_id)
            return ControlReply(
                False,
                "The run cannot take steering now (it is finishing, or its profile has no "
                "steering extension).",
                action,
                request_id,
            )
        if action in ("approve", "deny"):
            event = ExternalEvent(
                "approval",
                {
                    "id": payload.get("id"),
                    "decision": action,
                    "reason": payload.get("reason") or None,
                    "by": username,
                },
            )
        elif action == "answer":
            event = ExternalEvent(
                "ask_user.answer",
                {"id": payload.get("id"), "answer": payload.get("answer"), "by": username},
            )
        else:
            return ControlReply(False, f"Unknown action {action!r}.", action, request_id)
        correlation = payload.get("id")
        waiting = {item.get("id") for item in hosted.run.waiting_for or []}
        try:
            accepted = hosted.agent.emit_external_event(
                event,
                config=AgentRunConfig(session_id=hosted.session_id, request_id=request_id),
            )
        except (TypeError, ValueError) as exc:
            return ControlReply(False, f"Malformed answer: {exc}", action, request_id)
        if accepted:
            return ControlReply(True, "", action, request_id)
        if correlation not in waiting:
            reason = "No such pending request: it was already answered, timed out or never asked."
        else:
            reason = "The answer was refused (malformed, or already answered)."
        return ControlReply(False, reason, action, request_id)

    async def _cancel(self, hosted: HostedRun) -> None:
        if hosted.run.cancel_state:
            return
        hosted.run.cancel_state = CancelState.REQUESTED
        await self._state_changed(hosted, fields=["cancel_state"])
        if hosted.task is not None and not hosted.task.done():
            # Acknowledge (saved and sent) before cancelling: the run's end then reports
            # "stopped", and pages see requested -> acknowledged -> stopped in order.
            hosted.run.cancel_state = CancelState.ACKNOWLEDGED
            await self._state_changed(hosted, fields=["cancel_state"])
            hosted.task.cancel()

    # -- cross-process control -----------------------------------------------------------

    async def _remote(
        self, session_id: str, user: Any, action: str, payload: dict[str, Any]
    ) -> ControlReply:
        """Send an action to the process hosting the session's run and await its reply."""
        active = await _active_run(session_id)
        if active is None:
            if action == "message":
                # The run finished between our checks: try to start one again.
                session = await _load_session(session_id)
                if session is not None:
                    run = await _create_run(
                        session, user, str(payload.get("text", "")), self.host_id
                    )
                    if run is not None:
                        self._host(session, run)
                        return ControlReply(True, "", "message", run.request_id)
            return ControlReply(False, "No run is active in this session.", action)
        if action == "cancel" and not active.cancel_state:
            await Run.objects.filter(pk=active.pk, cancel_state="").aupdate(
                cancel_state=CancelState.REQUESTED
            )
        reply = await self._ask_host(
            session_id,
            {
                "action": action,
                "payload": payload,
                "user_id": getattr(user, "pk", None),
                "username": _username(user),
            },
        )
        if reply is None:
            return ControlReply(
                False, "The process hosting this run did not answer.", action, active.request_id
            )
        return ControlReply(
            bool(reply.get("accepted")),
            str(reply.get("reason", "")),
            str(reply.get("action") or action),
            reply.get("request_id") or active.request_id,
        )

    async def _ask_host(
        self, session_id: str, body: dict[str, Any], timeout: float = 5.0
    ) -> dict[str, Any] | None:
        correlation = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._replies[correlation] = future
        try:
            await self.layer.group_send(
                control_group(session_id),
                {
                    "type": "control.request",
                    "session_id": session_id,
                    "reply_to": self._control_channel,
                    "correlation": correlation,
                    **body,
                },
            )
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._replies.pop(correlation, None)

    async def _control_loop(self) -> None:
        assert self._control_channel is not None
        while True:
            try:
                message = await self.layer.receive(self._control_channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A layer hiccup (Redis restarting, a timeout) must not end control intake
                # for the life of the process.
                log.exception("control intake failed; retrying")
                await asyncio.sleep(1.0)
                continue
            kind = message.get("type")
            if kind == "control.reply":
                future = self._replies.get(message.get("correlation", ""))
                if future is not None and not future.done():
                    future.set_result(message)
            elif kind == "control.request":
                self._spawn(self._serve_control(message), "zett-control-request")

    async def _serve_control(self, message: dict[str, Any]) -> None:
        hosted = self.hosted.get(message.get("session_id", ""))
        if hosted is None:
            return  # not ours (a stale group membership): the real host answers
        action = message.get("action", "")
        if action == "snapshot":
            body: dict[str, Any] = {"snapshot": await self._local_partial(hosted)}
        else:
            reply = await self._apply(
                hosted,
                str(message.get("username", "")),
                message.get("user_id"),
                action,
                dict(message.get("payload") or {}),
            )
            body = reply.as_dict()
        await self.layer.send(
            message["reply_to"],
            {"type": "control.reply", "correlation": message.get("correlation"), **body},
        )

    # -- snapshot ------------------------------------------------------------------------

    async def snapshot(self, session_id: str) -> dict[str, Any]:
        """Transcript plus the answer still streaming, consistent with later live frames."""
        await self.start()
        partial: dict[str, Any] | None = None
        run: dict[str, Any] | None = None
        hosted = self.hosted.get(session_id)
        if hosted is not None and not hosted.done.is_set():
            partial = await self._local_partial(hosted)
        else:
            active = await _active_run(session_id)
            if active is not None:
                reply = await self._ask_host(session_id, {"action": "snapshot"}, timeout=2.0)
                if reply is not None:
                    partial = reply.get("snapshot")
        rows = await _transcript(session_id)
        messages = [message_dict(row, request_id=request_id) for row, request_id in rows]
        seq = 0
        persisted_iterations = 0
        if partial is not None:
            run = partial.pop("run")
            seq = partial.pop("seq")
            # RUN_STARTED comes before the store writes the input, and a page drops the
            # run.started frame the snapshot's seq covers: give it the message here.
            started = partial.pop("input", None)
            if started is not None and started["id"] not in {m["id"] for m in messages}:
                messages.append(started)
            assistant_rows = sum(
                1 for row, rid in rows if rid == run["request_id"] and row.role == "assistant"
            )
            # The model calls whose answers the transcript already holds: their late deltas
            # (seq above the snapshot's when an answer completed between our two reads)
            # must not reopen a streaming bubble.
            persisted_iterations = assistant_rows
            if assistant_rows >= partial["iteration"] or not (
                partial["text"] or partial["reasoning"]
            ):
                partial = None  # the streaming answer is already in the transcript
        if run is None:
            latest = await _active_run(session_id)
            if latest is not None:
                run = await _row_for(latest)
        return {
            "messages": messages,
            "message_ids": {m["id"] for m in messages},
            "run": run,
            "partial": partial,
            "seq": seq,
            "persisted_iterations": persisted_iterations,
        }

    async def _local_partial(self, hosted: HostedRun) -> dict[str, Any]:
        hosted.outbox.seal(hosted.seq)
        return {
            "run": hosted.row(),
            "seq": hosted.seq,
            "request_id": hosted.request_id,
            "iteration": hosted.iteration,
            "text": "".join(hosted.partial_text),
            "reasoning": "".join(hosted.partial_reasoning),
            "input": hosted.input_message,
        }

    # -- hosting ------------------------------------------------------------------------

    async def _create_and_dispatch(self, session: ChatSession, user: Any, text: str) -> Run | None:
        """Create the session's next run and host it here or hand it to a worker.

        None when another run of the session is active (the database decides).
        """
        if getattr(settings, "ZETT_RUN_WORKERS", False):
            run = await _create_run(session, user, text, "")
            if run is not None:
                await self.layer.send(
                    WORKER_CHANNEL, {"type": "run.start", "request_id": run.request_id}
                )
            return run
        run = await _create_run(session, user, text, self.host_id)
        if run is not None:
            self._host(session, run)
        return run

    async def host_dispatched(self, request_id: str) -> bool:
        """Claim a run a web process queued for the workers, and host it here."""
        await self.start()
        run = await _claim_run(request_id, self.host_id)
        if run is None:
            return False  # another worker took it, or the reaper gave up on it
        session = await _load_session(run.session_id)
        if session is None:
            return False
        self._host(session, run)
        return True

    def _host(self, session: ChatSession, run: Run) -> HostedRun:
        hosted = HostedRun(
            run=run,
            session_id=session.id,
            request_id=run.request_id,
            owner=session.owner.get_username(),
            owner_id=session.owner_id,
            profile_name=session.profile.name,
            title=session.title,
            double_texting=session.profile.double_texting,
            text=run.input_text,
        )
        self.hosted[session.id] = hosted
        hosted.sender = self._spawn(self._sender(hosted), f"zett-send-{run.request_id}")
        hosted.task = asyncio.create_task(
            self._execute(hosted, session), name=f"zett-run-{run.request_id}"
        )
        return hosted

    async def _execute(self, hosted: HostedRun, session: ChatSession) -> None:
        run = hosted.run
        status = RunStatus.FAILED
        try:
            await self.layer.group_add(control_group(hosted.session_id), self._control_channel)
            try:
                hosted.agent = await self._agent_for(session)
            except ProfileConfigError as exc:
                raise ProfileConfigError(f"The agent profile cannot be used: {exc}") from None
            run.status = RunStatus.RUNNING
            run.started_at = timezone.now()
            run.heartbeat_at = run.started_at
            await _checkpoint(
                run, [], ["status", "started_at", "heartbeat_at"], session=SessionStatus.RUNNING
            )
            message = UserMessage(hosted.text, attributes={"by": hosted.owner})
            config = AgentRunConfig(session_id=hosted.session_id, request_id=hosted.request_id)
            async with aclosing(hosted.agent.stream(message, config=config)) as events:
                async for event in events:
                    await self._handle(hosted, event)
            status = RunStatus.COMPLETED
        except asyncio.CancelledError:
            status = RunStatus.CANCELLED
            self._report_cancelled_calls(hosted)
            if self._closed:
                run.error = "The server shut down during this run."
                status = RunStatus.INTERRUPTED
            elif hosted.interrupted:
                status = RunStatus.INTERRUPTED
        except (ProviderError, ProfileConfigError) as exc:
            # Expected failures (the provider said no, the profile is broken): the
            # message is for the person, so no traceback in the log.
            log.warning("run %s failed: %s", hosted.request_id, exc)
            run.error = _describe_error(exc)
        except Exception as exc:
            log.exception("run %s failed", hosted.request_id)
            run.error = _describe_error(exc)
        finally:
            await asyncio.shield(self._finish(hosted, status))

    async def _finish(self, hosted: HostedRun, status: str) -> None:
        run = hosted.run
        try:
            self._flush_delta(hosted)
            run.status = status
            run.phase = {
                RunStatus.COMPLETED: "completed",
                RunStatus.CANCELLED: "cancelled",
            }.get(status, "failed")
            if run.cancel_state in (CancelState.REQUESTED, CancelState.ACKNOWLEDGED):
                run.cancel_state = CancelState.STOPPED
            run.current_tool = ""
            run.waiting_for = []
            run.finished_at = timezone.now()
            await _checkpoint(run, hosted.trace, _RUN_FIELDS, session=SessionStatus.IDLE)
            row = hosted.row()
            hosted.outbox.push(
                {
                    "type": "run.finished",
                    "request_id": hosted.request_id,
                    "seq": hosted.seq + 1,
                    "run": row,
                }
            )
            hosted.dirty = True
        except Exception:
            log.exception("could not record the end of run %s", hosted.request_id)
        finally:
            hosted.done.set()
            if hosted.sender is not None:
                hosted.outbox.wake.set()
            if self.hosted.get(hosted.session_id) is hosted:
                del self.hosted[hosted.session_id]
            await self._send_monitor([hosted.row()])
            try:
                await self.layer.group_discard(
                    control_group(hosted.session_id), self._control_channel
                )
            except Exception:
                log.exception("could not leave the control group of %s", hosted.session_id)
            leftovers = list(hosted.queued)
            if hosted.context is not None:
                unprocessed = hosted.context.state.metadata.get("unprocessed_steering") or []
                leftovers[:0] = [(hosted.owner_id, m.content) for m in unprocessed]
            if leftovers and not self._closed:
                self._spawn(self._start_queued(hosted.session_id, leftovers), "zett-queue")

    async def _start_queued(self, session_id: str, queued: list[tuple[int | None, str]]) -> None:
        """Start the first message that waited for the previous run; the rest wait on it.

        The rest join the new run's own queue ahead of anything sent during it, so that
        run's end starts the next: one chain per session, in the order they were sent.
        """
        user_id, text = queued[0]
        session = await _load_session(session_id)
        if session is None:
            return
        user = await _load_user(user_id) or session.owner
        run = await _create_run(session, user, text, self.host_id)
        if run is None:
            other = self.hosted.get(session_id)
            if other is not None:
                other.queued[:0] = queued  # a message got in first: wait behind it
                return
            log.warning("queued message for %s could not start: a run is active", session_id)
            return
        hosted = self._host(session, run)
        hosted.queued[:0] = queued[1:]

    async def _agent_for(self, session: ChatSession) -> Agent:
        profile = session.profile
        rows = getattr(session, "extension_rows", None)
        if rows is None:
            rows = await _extension_rows(profile.pk)
        fingerprint = repr(
            (
                profile.updated_at,
                profile.provider,
                profile.model_name,
                profile.provider_settings,
                profile.system_prompt,
                profile.max_iterations,
                rows,
            )
        )
        cached = self._agent_cache.get(profile.pk)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        agent = build_agent_for_profile(profile, rows)
        self._agent_cache[profile.pk] = (fingerprint, agent)
        return agent

    # -- events -> rows and frames -------------------------------------------------------

    async def _handle(self, hosted: HostedRun, event: AgentEvent) -> None:
        run = hosted.run
        hosted.seq = event.seq
        kind = event.type
        base = {"request_id": hosted.request_id, "seq": event.seq}
        if kind is _ET.TEXT_DELTA or kind is _ET.REASONING_DELTA:
            text_kind = "text" if kind is _ET.TEXT_DELTA else "reasoning"
            (hosted.partial_text if text_kind == "text" else hosted.partial_reasoning).append(
                event.delta
            )
            self._trace_delta(hosted, event, text_kind)
            hosted.outbox.push(
                {
                    "type": "run.delta",
                    **base,
                    "kind": text_kind,
                    "text": event.delta,
                    "first_seq": event.seq,
                    "iteration": event.iteration,
                }
            )
            return
        if kind is _ET.TOOL_CALL_DELTA:
            return  # the completed assistant message carries the assembled calls
        self._flush_delta(hosted)
        phase_changed = run.phase != event.phase.value
        run.phase = event.phase.value
        data: dict[str, Any] = {}
        fields = [
            "phase",
            "iterations",
        ]  # iterations: set at MODEL_STARTED, saved with the next write
        checkpoint = True
        if kind is _ET.RUN_STARTED:
            if hosted.agent is not None:
                hosted.context = hosted.agent.active_context(hosted.session_id)
            if event.message is not None:
                hosted.input_message = message_dict(event.message, request_id=hosted.request_id)
                hosted.outbox.push(
                    {
                        "type": "run.started",
                        **base,
                        "run": hosted.row(),
                        "message": hosted.input_message,
                    }
                )
            checkpoint = False
        elif kind is _ET.MODEL_STARTED:
            hosted.iteration = event.iteration
            hosted.partial_text.clear()
            hosted.partial_reasoning.clear()
            run.iterations = event.iteration
            fields.append("iterations")
            hosted.outbox.push({"type": "run.model_started", **base, "iteration": event.iteration})
            checkpoint = False
        elif kind is _ET.MODEL_COMPLETED:
            usage = event.usage
            if usage is not None:
                run.input_tokens += usage.input_tokens
                run.output_tokens += usage.output_tokens
                fields += ["input_tokens", "output_tokens"]
                data["usage"] = {"input": usage.input_tokens, "output": usage.output_tokens}
            if event.message is not None:
                data["tool_calls"] = [c.name for c in getattr(event.message, "tool_calls", ())]
                hosted.outbox.push(
                    {
                        "type": "run.message",
                        **base,
                        "message": message_dict(event.message, request_id=hosted.request_id),
                    }
                )
        elif kind is _ET.TOOL_STARTED and event.tool_call is not None:
            run.current_tool = event.tool_call.name
            hosted.tool_started[event.tool_call.id] = time.monotonic()
            fields.append("current_tool")
            data = {
                "tool": event.tool_call.name,
                "call_id": event.tool_call.id,
                "arguments": event.tool_call.arguments,
            }
            hosted.outbox.push(
                {
                    "type": "run.tool",
                    **base,
                    "status": "started",
                    "call": call_dict(event.tool_call),
                    "result": None,
                }
            )
        elif kind in (_ET.TOOL_COMPLETED, _ET.TOOL_FAILED, _ET.TOOL_SKIPPED):
            call = event.tool_call
            status = {
                _ET.TOOL_COMPLETED: "completed",
                _ET.TOOL_FAILED: "failed",
                _ET.TOOL_SKIPPED: "skipped",
            }[kind]
            run.current_tool = ""
            fields.append("current_tool")
            if call is not None:
                started = hosted.tool_started.pop(call.id, None)
                data = {"tool": call.name, "call_id": call.id, "status": status}
                if started is not None:
                    data["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
                if _drop_waiting(run, call.id):
                    fields.append("waiting_for")
            result = (
                message_dict(event.message, request_id=hosted.request_id)
                if event.message is not None
                else None
            )
            hosted.outbox.push(
                {
                    "type": "run.tool",
                    **base,
                    "status": status,
                    "call": call_dict(call) if call else None,
                    "result": result,
                }
            )
        elif kind is _ET.STEERING_STARTED:
            if event.message is not None:
                data = {"text": event.message.content}
                hosted.outbox.push(
                    {
                        "type": "run.message",
                        **base,
                        "message": message_dict(event.message, request_id=hosted.request_id),
                    }
                )
        elif kind is _ET.CUSTOM:
            data = {"name": event.name, "data": dict(event.data)}
            if _apply_waiting(run, event.name, dict(event.data)):
                fields.append("waiting_for")
            hosted.outbox.push(
                {"type": "run.custom", **base, "name": event.name, "data": dict(event.data)}
            )
        elif kind is _ET.RUN_COMPLETED:
            checkpoint = False  # _finish writes the final state
        new_status = RunStatus.WAITING if run.waiting_for else RunStatus.RUNNING
        session_status = None
        if run.status != new_status and run.status in (RunStatus.RUNNING, RunStatus.WAITING):
            run.status = new_status
            fields.append("status")
            session_status = (
                SessionStatus.WAITING if new_status == RunStatus.WAITING else SessionStatus.RUNNING
            )
            checkpoint = True
        hosted.trace.append(
            RunEvent(
                run=run,
                seq=event.seq,
                last_seq=event.seq,
                type=kind.value,
                phase=event.phase.value,
                iteration=event.iteration,
                data=data,
            )
        )
        hosted.dirty = True
        if (
            phase_changed
            or "waiting_for" in fields
            or "status" in fields
            or kind is _ET.TOOL_STARTED
        ):
            hosted.outbox.push({"type": "run.state", **base, "run": hosted.row()})
        if checkpoint:
            await _checkpoint(run, hosted.trace, fields, session=session_status)

    def _trace_delta(self, hosted: HostedRun, event: AgentEvent, text_kind: str) -> None:
        entry = hosted.pending_delta
        if entry is None or entry.data.get("kind") != text_kind:
            self._flush_delta(hosted)
            entry = RunEvent(
                run=hosted.run,
                seq=event.seq,
                last_seq=event.seq,
                type=event.type.value,
                phase=event.phase.value,
                iteration=event.iteration,
                data={"kind": text_kind, "text": "", "count": 0},
            )
            hosted.pending_delta = entry
            hosted.pending_parts = []
        entry.last_seq = event.seq
        # Joined once at flush: += on the growing text made long answers quadratic.
        hosted.pending_parts.append(event.delta)

    def _report_cancelled_calls(self, hosted: HostedRun) -> None:
        """Frames and trace entries for the tool calls the runtime closed while cancelling.

        The runtime emits their TOOL_FAILED events after the host stopped reading the
        stream (cancelling it is what closed them), so without this the page and the
        trace would show those calls running forever.
        """
        context = hosted.context
        if context is None:
            return
        messages = context.state.messages
        start = next((i for i, m in enumerate(messages) if m is context.input_message), None)
        if start is None:
            return  # cancelled before the input was appended: no call of this run exists
        calls = {
            call.id: call
            for message in messages[start:]
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
        }
        self._flush_delta(hosted)
        for message in messages[start:]:
            if not (isinstance(message, ToolMessage) and message.attributes.get("cancelled")):
                continue
            call = calls.get(message.tool_call_id)
            hosted.tool_started.pop(message.tool_call_id, None)
            hosted.seq += 1
            hosted.trace.append(
                RunEvent(
                    run=hosted.run,
                    seq=hosted.seq,
                    last_seq=hosted.seq,
                    type=_ET.TOOL_FAILED.value,
                    phase="cancelled",
                    iteration=hosted.iteration,
                    data={
                        "tool": message.name,
                        "call_id": message.tool_call_id,
                        "status": "failed",
                    },
                )
            )
            hosted.outbox.push(
                {
                    "type": "run.tool",
                    "request_id": hosted.request_id,
                    "seq": hosted.seq,
                    "status": "failed",
                    "call": call_dict(call) if call else None,
                    "result": message_dict(message, request_id=hosted.request_id),
                }
            )

    def _flush_delta(self, hosted: HostedRun) -> None:
        entry = hosted.pending_delta
        if entry is not None:
            entry.data["text"] = "".join(hosted.pending_parts)
            entry.data["count"] = len(hosted.pending_parts)
            hosted.trace.append(entry)
            hosted.pending_delta = None
            hosted.pending_parts = []

    async def _state_changed(self, hosted: HostedRun, *, fields: list[str]) -> None:
        await _checkpoint(hosted.run, [], fields)
        hosted.dirty = True
        hosted.outbox.push(
            {
                "type": "run.state",
                "request_id": hosted.request_id,
                "seq": hosted.seq,
                "run": hosted.row(),
            }
        )

    async def _sender(self, hosted: HostedRun) -> None:
        """Send the run's frames in order; a text delta waits one batch window at most.

        A delta is held only while the previous frame went out less than a window ago,
        so the first token after a pause leaves at once and a fast stream is sent as one
        frame per window.
        """
        window = _setting("ZETT_DELTA_BATCH_SECONDS", 0.025)
        group = session_group(hosted.session_id)
        outbox = hosted.outbox
        loop = asyncio.get_running_loop()
        last_sent = -window
        while True:
            if not outbox.items:
                if hosted.done.is_set():
                    return
                outbox.wake.clear()
                await outbox.wake.wait()
                continue
            head = outbox.items[0]
            if head["type"] == "run.delta" and len(outbox.items) == 1 and not hosted.done.is_set():
                hold = last_sent + window - loop.time()
                if hold > 0:
                    await asyncio.sleep(hold)
            last_sent = loop.time()
            while outbox.items:
                frame = outbox.items.popleft()
                try:
                    await self.layer.group_send(group, frame)
                except Exception:
                    log.exception("could not send a frame of run %s", hosted.request_id)

    # -- monitor, heartbeats, reaper -------------------------------------------------------

    async def _send_monitor(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            try:
                await self.layer.group_send(MONITOR_GROUP, {"type": "monitor.rows", "rows": rows})
            except Exception:
                log.exception("could not send monitor rows")

    async def _monitor_loop(self) -> None:
        interval = _setting("ZETT_MONITOR_INTERVAL_SECONDS", 0.25)
        while True:
            await asyncio.sleep(interval)
            rows = []
            for hosted in list(self.hosted.values()):
                if hosted.dirty:
                    hosted.dirty = False
                    rows.append(hosted.row())
            await self._send_monitor(rows)

    async def _heartbeat_loop(self) -> None:
        interval = _setting("ZETT_HEARTBEAT_SECONDS", 2.0)
        while True:
            await asyncio.sleep(interval)
            try:
                if self.hosted:
                    await self._beat()
                await self.reap_stale_runs()
            except Exception:
                log.exception("heartbeat or reaper failed")

    async def _beat(self) -> None:
        """Mark our runs alive; a run another process already gave up on is stopped here."""
        hosted = {h.request_id: h for h in self.hosted.values() if not h.done.is_set()}
        alive = await _beat(self.host_id, list(hosted))
        for request_id, run in hosted.items():
            if request_id not in alive and run.task is not None and not run.task.done():
                log.warning("run %s was marked interrupted elsewhere; stopping it", request_id)
                run.run.error = "Interrupted: this process stopped beating for too long."
                run.interrupted = True
                run.task.cancel()

    async def reap_stale_runs(self) -> list[str]:
        """Mark runs whose host stopped beating as interrupted; returns their request ids.

        A run counts as stale one heartbeat before ZETT_STALE_RUN_SECONDS of silence, so
        with the reaper itself running every heartbeat a dead host's runs are marked
        within ZETT_STALE_RUN_SECONDS of its death.
        """
        stale_after = _setting("ZETT_STALE_RUN_SECONDS", 10.0)
        beat = _setting("ZETT_HEARTBEAT_SECONDS", 2.0)
        cutoff = timezone.now() - timedelta(seconds=max(beat, stale_after - beat))
        stale = await _reap(self.host_id, cutoff)
        for request_id, session_id, row in stale:
            await self.layer.group_send(
                session_group(session_id),
                {"type": "run.finished", "request_id": request_id, "seq": 1 << 30, "run": row},
            )
        await self._send_monitor([row for _, _, row in stale])
        return [request_id for request_id, _, _ in stale]


# -- database helpers (short sync ORM calls on the ORM thread) ----------------------------

_RUN_FIELDS = [
    "status",
    "phase",
    "cancel_state",
    "current_tool",
    "waiting_for",
    "iterations",
    "input_tokens",
    "output_tokens",
    "error",
    "finished_at",
]


@sync_to_async
def _load_session(session_id: str) -> ChatSession | None:
    """The session with its owner, profile and the profile's extension rows (one hop)."""
    session = ChatSession.objects.select_related("owner", "profile").filter(pk=session_id).first()
    if session is not None:
        session.extension_rows = _extension_rows_now(session.profile_id)  # type: ignore[attr-defined]
    return session


@sync_to_async
def _load_user(user_id: int | None) -> Any:
    from django.contrib.auth import get_user_model

    if user_id is None:
        return None
    return get_user_model().objects.filter(pk=user_id).first()


@sync_to_async
def _create_run(session: ChatSession, user: Any, text: str, host: str) -> Run | None:
    """Create the session's active run, or None when another one is active."""
    try:
        with transaction.atomic():
            run = Run.objects.create(
                session=session,
                profile=session.profile,
                started_by=user if getattr(user, "pk", None) else None,
                input_text=text,
                status=RunStatus.QUEUED,
                phase="created",
                host=host,
                heartbeat_at=timezone.now(),
            )
    except IntegrityError:
        return None
    fields = {"updated_at": timezone.now()}
    if not session.title:
        title = " ".join(text.split())
        session.title = title[:80] + ("…" if len(title) > 80 else "")
        fields["title"] = session.title
    ChatSession.objects.filter(pk=session.pk).update(**fields)
    return run


def _beat_now(host: str, request_ids: list[str]) -> set[str]:
    """Beat for our active runs; return those still active (others were reaped)."""
    runs = Run.objects.filter(host=host, request_id__in=request_ids, status__in=RunStatus.active())
    runs.update(heartbeat_at=timezone.now())
    return set(runs.values_list("request_id", flat=True))


# Liveness must not wait behind the runs' own writes on the one ORM thread: under load
# that queue can be seconds long and a healthy host would look dead. Heartbeats (and the
# reaper) use a connection of their own in a worker thread, cleaned up around each call.
_beat = database_sync_to_async(_beat_now, thread_sensitive=False)


@sync_to_async
def _claim_run(request_id: str, host: str) -> Run | None:
    claimed = Run.objects.filter(request_id=request_id, host="", status=RunStatus.QUEUED).update(
        host=host, heartbeat_at=timezone.now()
    )
    return Run.objects.get(request_id=request_id) if claimed else None


@sync_to_async
def _active_run(session_id: str) -> Run | None:
    return Run.objects.filter(session_id=session_id, status__in=RunStatus.active()).first()


@sync_to_async
def _row_for(run: Run) -> dict[str, Any]:
    session = ChatSession.objects.select_related("owner", "profile").get(pk=run.session_id)
    return run_row(
        run, owner=session.owner.get_username(), profile=session.profile.name, title=session.title
    )


@sync_to_async
def _transcript(session_id: str) -> list[tuple[Message, str | None]]:
    rows = Message.objects.filter(session_id=session_id).select_related("run").order_by("seq")
    return [(row, row.run.request_id if row.run else None) for row in rows]


def _extension_rows_now(profile_pk: int) -> tuple[tuple[Any, ...], ...]:
    from ..models import ExtensionSetting

    return tuple(
        ExtensionSetting.objects.filter(profile_id=profile_pk)
        .order_by("position", "id")
        .values_list("key", "instance_name", "enabled", "priority", "settings")
    )


_extension_rows = sync_to_async(_extension_rows_now)


@sync_to_async
def _checkpoint(
    run: Run, trace: list[RunEvent], fields: list[str], *, session: str | None = None
) -> None:
    """Write the run's changed fields, its unwritten trace and the session's status at once.

    One transaction, one hop to the ORM thread: under load those hops are what a run
    waits for.
    """
    with transaction.atomic():
        if session is not None:
            ChatSession.objects.filter(pk=run.session_id).update(
                status=session, updated_at=timezone.now()
            )
        if fields:
            Run.objects.filter(pk=run.pk).update(
                **{name: getattr(run, name) for name in set(fields)}
            )
        if trace:
            RunEvent.objects.bulk_create(trace)
            trace.clear()


@sync_to_async
def _record_action(
    session_id: str,
    request_id: str | None,
    user: Any,
    action: str,
    payload: dict[str, Any],
    reply: ControlReply,
) -> None:
    run = Run.objects.filter(request_id=request_id).first() if request_id else None
    if run is None and action == "message" and reply.accepted and reply.action == "message":
        return  # an ordinary chat message that started a run is not an operator action
    OperatorAction.objects.create(
        session_id=session_id,
        run=run,
        user=user if getattr(user, "pk", None) else None,
        action=action if action != "message" else f"message:{reply.action or 'message'}",
        payload={k: v for k, v in payload.items() if k != "HEADERS"},
        outcome="accepted" if reply.accepted else "rejected",
        reason=reply.reason,
    )


def reap_stale_runs_db(host_id: str | None, cutoff: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """Mark active runs not beating since cutoff as interrupted (except host_id's own).

    Each run is updated only while still active, so processes reaping at once
    never report one run twice. Returns (request id, session id, monitor row).
    """
    close_old_connections()
    candidates = Run.objects.filter(status__in=RunStatus.active(), heartbeat_at__lt=cutoff)
    if host_id is not None:
        candidates = candidates.exclude(host=host_id)
    stale = list(candidates.select_related("session__owner", "session__profile"))
    reaped = []
    now = timezone.now()
    for run in stale:
        updated = Run.objects.filter(pk=run.pk, status__in=RunStatus.active()).update(
            status=RunStatus.INTERRUPTED,
            phase="failed",
            current_tool="",
            waiting_for=[],
            finished_at=now,
            error=(
                "Interrupted: no worker picked this run up (is `manage.py runworker "
                f"{WORKER_CHANNEL}` running?)."
                if not run.host
                else "Interrupted: the server process hosting this run stopped."
            ),
        )
        if not updated:
            continue
        ChatSession.objects.filter(pk=run.session_id).update(
            status=SessionStatus.IDLE, updated_at=now
        )
        run.refresh_from_db()
        reaped.append(
            (
                run.request_id,
                run.session_id,
                run_row(
                    run,
                    owner=run.session.owner.get_username(),
                    profile=run.session.profile.name,
                    title=run.session.title,
                ),
            )
        )
    return reaped


_reap = database_sync_to_async(reap_stale_runs_db, thread_sensitive=False)


# -- waiting-for bookkeeping -------------------------------------------------------------


def _apply_waiting(run: Run, name: str, data: dict[str, Any]) -> bool:
    waiting = list(run.waiting_for or [])
    if name == "approval.requested":
        waiting.append(
            {
                "kind": "approval",
                "id": data.get("id"),
                "tool": data.get("tool"),
                "arguments": data.get("arguments"),
                "deadline": data.get("deadline"),
            }
        )
    elif name == "ask_user.question":
        waiting.append(
            {
                "kind": "question",
                "id": data.get("id"),
                "question": data.get("question"),
                "choices": data.get("choices"),
            }
        )
    elif name in ("approval.resolved", "ask_user.answered", "ask_user.expired"):
        waiting = [item for item in waiting if item.get("id") != data.get("id")]
    else:
        return False
    run.waiting_for = waiting
    return True


def _drop_waiting(run: Run, call_id: str) -> bool:
    waiting = run.waiting_for or []
    kept = [item for item in waiting if item.get("id") != call_id]
    if len(kept) != len(waiting):
        run.waiting_for = kept
        return True
    return False


def _username(user: Any) -> str:
    return user.get_username() if getattr(user, "pk", None) else ""


def _describe_error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 2000 else text[:2000] + "…"


# -- one manager per event loop -----------------------------------------------------------

_managers: dict[int, tuple[asyncio.AbstractEventLoop, RunManager]] = {}


def get_run_manager() -> RunManager:
    """The RunManager of the running event loop (created on first use)."""
    loop = asyncio.get_running_loop()
    entry = _managers.get(id(loop))
    if entry is None or entry[0] is not loop:
        for key, (other, _) in list(_managers.items()):
            if other.is_closed():
                del _managers[key]
        manager = RunManager()
        _managers[id(loop)] = (loop, manager)
        return manager
    return entry[1]


def managers() -> list[RunManager]:
    return [manager for _, manager in _managers.values()]


__all__ = [
    "ControlReply",
    "HOST_ID",
    "RunManager",
    "control_group",
    "get_run_manager",
    "session_group",
]
