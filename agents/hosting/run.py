"""HostedRun: one run executing in this process: its task, projection, outbox and end.

The run owns everything that happens to it: executing the agent, turning events into
rows and frames (through its RunProjection), being cancelled, steered or answered, and
writing its final record. It tells the manager it finished through ``on_finished``
instead of calling back into it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from django.utils import timezone

from .. import observability, session_store
from ..db_retry import DatabaseUnavailable
from ..extensions.budget import BudgetExceeded
from ..models import CancelState, RunKind, RunStatus
from ..profiles.cache import AgentCache
from ..profiles.catalog import ProfileConfigError
from ..runtime import (
    Agent,
    AgentEventType,
    AgentRunConfig,
    ExternalEvent,
    RunHandle,
    UserMessage,
)
from ..runtime.context import AgentRunContext
from ..runtime.errors import ModelCallError
from ..runtime.extension import overrides
from ..runtime.operator import OperatorProtocol, operator_protocol
from . import db
from .outbox import Outbox
from .payloads import notice, run_row
from .projection import RUN_FIELDS, RunProjection
from .settings import HostSettings
from .starts import Intake
from .wire import Partial, session_group

log = logging.getLogger(__name__)

_NO_PROTOCOL = OperatorProtocol({}, ())

#: The message "Compact conversation" puts in a compaction run's notice when nothing changed.
NOTHING_TO_COMPACT = "Nothing to summarise yet: the conversation is still short."
NO_COMPACTION = "This agent profile has no compaction extension (summary_compaction)."


class FollowUp(NamedTuple):
    """What waits for the active run to end: a message, or a compaction (text empty)."""

    user_id: int | None
    text: str
    kind: str = RunKind.ANSWER


class HostedRun:
    """What the host keeps in memory for one run it is executing."""

    def __init__(
        self,
        intake: Intake,
        *,
        layer: Any,
        settings: HostSettings,
        agents: AgentCache,
        on_finished: Callable[[HostedRun, list[FollowUp]], None],
        shutting_down: Callable[[], bool],
    ) -> None:
        session = intake.session
        self.run = intake.run
        self.session_id: str = session.id
        self.request_id: str = intake.run.request_id
        self.owner = session.owner.get_username()
        self.owner_id: int = session.owner_id
        self.profile_name = session.profile.name
        self.title = str(session)
        self.double_texting = session.profile.double_texting
        self._intake = intake
        self._settings = settings
        self._agents = agents
        self._on_finished = on_finished
        self._shutting_down = shutting_down
        self.projection = RunProjection(self.run, _NO_PROTOCOL, self.row)
        self.outbox = Outbox(
            layer,
            session_group(self.session_id),
            window=settings.delta_batch_seconds,
            label=self.request_id,
        )
        self.agent: Agent | None = None
        self.context: AgentRunContext | None = None
        self.handle: RunHandle | None = None
        self.queued: list[FollowUp] = []  # in the order sent
        self.done = asyncio.Event()
        self.interrupted = False  # another process reaped it: it ends as interrupted
        self.finishing = False  # its end is being recorded: the database may show it ended
        self.stopped_by = ""  # who cancelled it
        self.task: asyncio.Task[None] | None = None
        self.sender: asyncio.Task[None] | None = None
        self._partial_saved_at = time.monotonic()
        self._partial_writer: asyncio.Task[None] | None = None
        self.meter = observability.RunMeter(
            self.profile_name, self.session_id, self.request_id, self.owner_id
        )

    def row(self) -> dict[str, Any]:
        return run_row(
            self.run,
            owner=self.owner,
            profile=self.profile_name,
            title=self.title,
            estimate=self.projection.live_output_estimate,
        )

    @property
    def protocol(self) -> OperatorProtocol:
        return self.projection.protocol

    def start(self) -> None:
        self.meter.started()
        self.sender = asyncio.create_task(self.outbox.run(), name=f"zett-send-{self.request_id}")
        self.task = asyncio.create_task(self._execute(), name=f"zett-run-{self.request_id}")

    # -- executing ---------------------------------------------------------------------

    async def _execute(self) -> None:
        run = self.run
        status = RunStatus.FAILED
        try:
            intake = self._intake
            self.projection.prices = intake.prices
            self.projection.other_prices = intake.other_prices
            if intake.history is not None:
                session_store.preload(self.request_id, intake.history)
            try:
                agent = self._agents.agent_for(
                    self._intake.session.profile, self._intake.extension_rows
                )
            except ProfileConfigError as exc:
                raise ProfileConfigError(f"The agent profile cannot be used: {exc}") from None
            self.agent = agent
            self.projection.protocol = operator_protocol(agent.extensions)
            config = AgentRunConfig(session_id=self.session_id, request_id=self.request_id)
            if run.kind == RunKind.COMPACTION:
                if not any(overrides(ext, "on_compact") for ext in agent.extensions):
                    raise ProfileConfigError(NO_COMPACTION)
                handle = self.handle = agent.start_compaction(config)
            else:
                message = UserMessage(
                    run.input_text, id=self._intake.input_id, attributes={"by": self.owner}
                )
                handle = self.handle = agent.start(message, config=config)
            self.context = handle.context
            await self._follow(handle)
            status = self._outcome(handle)
        except asyncio.CancelledError:
            # Cancelled before the run started (the agent was being built), or shutdown.
            status = self._stopped_status()
        except (ModelCallError, ProfileConfigError) as exc:
            self._expected_failure(exc)
        except DatabaseUnavailable as exc:
            self._database_failure(exc)
        except Exception as exc:
            log.exception("run %s failed", self.request_id)
            run.error = describe_error(exc)
        finally:
            await asyncio.shield(self._finish(status))

    async def _follow(self, handle: RunHandle) -> None:
        """Apply the run's events to the end, those its cancellation emits included.

        If following itself fails (the database is gone) or this task is cancelled (the
        process shuts down), the run is cancelled and its remaining events are applied
        as far as they can be, so nothing is left open.
        """
        events = handle.events()
        try:
            async for event in events:
                await self._apply(event)
        except BaseException:
            await events.aclose()
            try:
                async for event in handle.events():
                    await self._apply(event)
            except Exception as exc:
                log.warning("run %s: events after stopping not recorded: %s", self.request_id, exc)
            await handle.wait()
            if handle.error is None:
                raise  # ours, not the run's: the handlers above name it

    def _outcome(self, handle: RunHandle) -> str:
        if handle.cancelled:
            return self._stopped_status()
        error = handle.error
        if error is None:
            return self._compaction_outcome()
        if isinstance(error, BudgetExceeded):
            log.info("run %s stopped: %s", self.request_id, error)
            self.run.error = describe_error(error)
            return RunStatus.BUDGET_EXCEEDED
        if isinstance(error, ModelCallError | ProfileConfigError):
            self._expected_failure(error)
        elif isinstance(error, DatabaseUnavailable):
            self._database_failure(error)
        else:
            log.error("run %s failed", self.request_id, exc_info=error)
            self.run.error = describe_error(error)
        return RunStatus.FAILED

    def _compaction_outcome(self) -> str:
        """A compaction that changed nothing fails, saying why; the context is as it was."""
        if self.run.kind != RunKind.COMPACTION:
            return RunStatus.COMPLETED
        result = self.projection.compaction
        if result is None:
            self.run.error = NOTHING_TO_COMPACT
        elif not result.get("compacted"):
            reason = str(result.get("error") or "the summary failed")
            self.run.error = f"The conversation was not compacted: {reason}"
        else:
            return RunStatus.COMPLETED
        return RunStatus.FAILED

    def _stopped_status(self) -> str:
        if self._shutting_down():
            self.run.error = "The server shut down during this run."
            return RunStatus.INTERRUPTED
        return RunStatus.INTERRUPTED if self.interrupted else RunStatus.CANCELLED

    def _expected_failure(self, exc: BaseException) -> None:
        # Expected failures (the provider said no, the profile is broken): the message
        # is for the person, so no traceback in the log.
        log.warning("run %s failed: %s", self.request_id, exc)
        self.run.error = describe_error(exc)

    def _database_failure(self, exc: BaseException) -> None:
        log.warning("run %s stopped: %s", self.request_id, exc)
        self.run.error = "The run stopped: the database was unavailable."

    async def _apply(self, event: Any) -> None:
        projection = self.projection
        step = projection.apply(event)
        self.meter.event(event)
        for frame in step.frames:
            self.outbox.push(frame)
        if not step.checkpoint and event.type in (
            AgentEventType.TEXT_DELTA,
            AgentEventType.REASONING_DELTA,
        ):
            self._checkpoint_partial()
        if step.checkpoint:
            # Awaited, the one at a model call's start too: written behind the stream it put
            # the first tokens of runs starting together behind a crowd of writes
            # (bench/streaming.py: p99 token latency 31 ms awaited, 57-84 ms behind).
            await db.checkpoint(self.run, projection.trace, step.fields, step.session_status)

    def _checkpoint_partial(self) -> None:
        """Save the streaming answer now and then, without holding up the stream.

        A run whose process dies then still shows what it had said. At most one write is
        in flight per run; the answer's end (or the run's) supersedes it.
        """
        now = time.monotonic()
        writer = self._partial_writer
        if now - self._partial_saved_at < self._settings.checkpoint_seconds or (
            writer is not None and not writer.done()
        ):
            return
        self._partial_saved_at = now
        self._partial_writer = asyncio.create_task(
            db.save_partial(self.run.pk, self.projection.partial[0]),
            name=f"zett-partial-{self.request_id}",
        )
        self._partial_writer.add_done_callback(_log_failure)

    async def _finish(self, status: str) -> None:
        self.finishing = True
        projection = self.projection
        text, reasoning = projection.partial
        partial = None
        if status != RunStatus.COMPLETED and (text or reasoning):
            partial = (text, reasoning, {"stopped": status, "by": self.stopped_by})
        finished = projection.finish(status, timezone.now())
        self.meter.finished(status, self.run.error, self.run.cost, self.run.cost_currency)
        session_store.forget(self.request_id)
        if self._partial_writer is not None and not self._partial_writer.done():
            await asyncio.wait({self._partial_writer})  # the final record comes after it
        try:
            stored = await self._record_end(partial)
            if stored is not None:
                finished["partial"] = stored  # type: ignore[typeddict-unknown-key]
            if status != RunStatus.COMPLETED:
                finished["notice"] = notice(self.run)  # type: ignore[typeddict-unknown-key]
        finally:
            self.outbox.push(finished)
            self.outbox.close()
            self.done.set()
            leftovers = list(self.queued)
            if self.handle is not None:
                unprocessed = self.handle.unprocessed_steering
                leftovers[:0] = [FollowUp(self.owner_id, m.content) for m in unprocessed]
            self._on_finished(self, leftovers)

    async def _record_end(
        self, partial: tuple[str, str, dict[str, Any]] | None
    ) -> dict[str, Any] | None:
        """Write the final record; while the database is away, keep trying until it is back.

        A run's end is never lost and its session never stays "running": the retry outlives
        the usual window, and only a shutting-down process gives up (its successor's
        start-up recovery then ends the run as interrupted).
        """
        delay = 1.0
        while True:
            try:
                return await db.finish_run(self.run, self.projection.trace, RUN_FIELDS, partial)
            except DatabaseUnavailable as exc:
                if self._shutting_down():
                    log.error("could not record the end of run %s: %s", self.request_id, exc)
                    return None
                log.warning("end of run %s not recorded yet (%s); retrying", self.request_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
            except Exception:
                log.exception("could not record the end of run %s", self.request_id)
                return None

    # -- what operators do to it -------------------------------------------------------

    async def cancel(self, by: str = "") -> bool:
        """Request cancellation (saved and sent first); False when already requested."""
        run = self.run
        if run.cancel_state:
            return False
        self.stopped_by = by
        run.cancel_state = CancelState.REQUESTED
        await self._state_changed()
        if self.task is not None and not self.task.done():
            # Acknowledge (saved and sent) before cancelling: the run's end then reports
            # "stopped", and pages see requested -> acknowledged -> stopped in order.
            run.cancel_state = CancelState.ACKNOWLEDGED
            await self._state_changed()
            self._stop()
        return True

    def _stop(self) -> None:
        """Cancel the run; its cancellation's events still reach the projection."""
        if self.handle is not None:
            self.handle.cancel()
        elif self.task is not None:
            self.task.cancel()  # not started yet: nothing of it to follow

    def interrupt(self, reason: str) -> None:
        """Stop a run another process already gave up on; it ends as interrupted."""
        if self.task is not None and not self.task.done() and not self.finishing:
            log.warning("run %s was marked interrupted elsewhere; stopping it", self.request_id)
            self.run.error = reason
            self.interrupted = True
            self._stop()

    async def _state_changed(self) -> None:
        await db.checkpoint(self.run, [], ("cancel_state",), None)
        self.outbox.push(self.projection.state_frame())

    def offer(self, event: ExternalEvent) -> bool:
        """Hand an operator's event to the run's extensions; True when one accepted it."""
        if self.handle is None:
            return False
        return bool(self.handle.emit_external_event(event))

    def partial(self) -> tuple[int, Partial | None, dict[str, Any] | None]:
        """(seq, the streaming answer, the input message) as of now, for a snapshot."""
        projection = self.projection
        self.outbox.seal(projection.seq)
        text, reasoning = projection.partial
        streaming = (
            Partial(self.request_id, projection.iteration, text, reasoning)
            if text or reasoning
            else None
        )
        return projection.seq, streaming, projection.input_message


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not checkpoint a streaming answer: %s", task.exception())


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 2000 else text[:2000] + "…"
