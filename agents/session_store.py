"""DjangoSessionStore: a session's history restored from, and appended to, the database.

Also the one conversion between runtime messages and Message rows (both directions).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from .bulk_sql import insert_rows
from .db_retry import db_hop, retrying
from .group_commit import GroupCommit, each_alone_if_whole_fails
from .models import Message, Role, Run
from .per_loop import PerLoop
from .runtime.events import CompactionEvent, ExtensionEvent, MessageAppendedEvent
from .runtime.extension import AgentExtension
from .runtime.history import close_dangling_tool_calls
from .runtime.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

if TYPE_CHECKING:
    from .runtime.context import AgentRunContext

log = logging.getLogger(__name__)

_STATE_KEY = "zett.store"

#: A session's rows in order and the request's Run pk, as ``on_state`` restores them.
History = tuple[list[Message], int | None]

# Histories read by the host in the transaction that created the run (request id -> it):
# ``on_state`` takes its request's instead of making another hop to the ORM thread.
_preloaded: dict[str, History] = {}


def preload(request_id: str, history: History) -> None:
    """Hand ``on_state`` the history already read for this request (taken once, then gone)."""
    _preloaded[request_id] = history


def forget(request_id: str) -> None:
    """Drop a preloaded history nobody took (the run ended before its ``on_state``)."""
    _preloaded.pop(request_id, None)


@dataclass(slots=True)
class _StoreState:
    next_seq: int  # seq of the next message row of this session
    run_pk: int | None  # the Run row this request belongs to, if the dashboard made one
    stored: frozenset[str] = frozenset()  # ids the host stored before the run (its input)


class DjangoSessionStore(AgentExtension):
    """Restores history in on_state; writes every persisted appended message before moving on.

    The write happens inside the MessageAppendedEvent delivery, which the runtime
    awaits, so a message is in the database before the run continues: a crash or
    restart loses nothing that was appended. Restored history follows the
    accumulator's rules: only ``include_in_messages`` messages (so system
    instructions only when an extension marked them so), and tool calls left
    without a result by an interrupted run are closed for the provider
    (request-scoped, not persisted). Rows that already belong to this request (the
    host stores the input message with the Run, in one transaction) are not
    restored as history, and not written a second time.
    Database hops are retried on a fresh connection (agents.db_retry).
    """

    priority = 10

    async def on_state(self, context: AgentRunContext) -> None:
        history = _preloaded.pop(context.request_id, None)
        if history is None:
            history = await retrying(load_history, context.session_id, context.request_id)
        rows, run_pk = history
        own = frozenset(row.message_id for row in rows if run_pk and row.run_id == run_pk)
        context.metadata[_STATE_KEY] = _StoreState(
            next_seq=(rows[-1].seq + 1) if rows else 1, run_pk=run_pk, stored=own
        )
        restored = [
            row_to_message(row)
            for row in _in_context(rows)
            # A SystemMessage is stored with include_in_messages=False unless an extension
            # marked it part of the dialogue: only then is it replayed, in its place.
            if row.include_in_messages and row.message_id not in own
        ]
        if not restored:
            return
        current = context.state.messages
        instructions = [m for m in current if isinstance(m, SystemMessage)]
        others = [m for m in current if not isinstance(m, SystemMessage)]
        context.replace_messages(
            [*instructions, *close_dangling_tool_calls(restored), *others], emit_new=False
        )

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        if isinstance(event, CompactionEvent):
            await _write_uncancellable(self._compact(context, event))
            return
        if not isinstance(event, MessageAppendedEvent) or not event.message.persist:
            return
        state = await self._state(context)
        if event.message.id in state.stored:
            return
        await _write_uncancellable(self._write(context, state, event))

    async def _state(self, context: AgentRunContext) -> _StoreState:
        state = context.metadata.get(_STATE_KEY)
        if not isinstance(state, _StoreState):
            # A message appended before on_state ran (setup-time add_message of an
            # extension with a lower priority): find our place now.
            last = await (
                Message.objects.filter(session_id=context.session_id)
                .order_by("-seq")
                .values_list("seq", flat=True)
                .afirst()
            )
            run_pk = await (
                Run.objects.filter(request_id=context.request_id)
                .values_list("pk", flat=True)
                .afirst()
            )
            state = _StoreState(next_seq=(last or 0) + 1, run_pk=run_pk)
            context.metadata[_STATE_KEY] = state
        return state

    async def _compact(self, context: AgentRunContext, event: CompactionEvent) -> None:
        """Store the summary as a row and mark the compressed rows summarised by it.

        Positions are over the dialogue still in ``context.state`` (the compaction
        publishes before it replaces the context). Nothing is deleted: the compressed
        rows stay for the transcript and are left out of every later restore.
        """
        dialogue = [m for m in context.state.messages if not _is_instruction(m)]
        compressed = [m.id for m in dialogue[event.compressed_from - 1 : event.compressed_to]]
        summary = event.messages[0] if event.messages else None
        if not isinstance(summary, UserMessage):
            summary = UserMessage(
                f"Summary of the earlier conversation:\n{event.summary}",
                attributes={"compaction_summary": True},
            )
        state = await self._state(context)
        row = {
            "session_id": context.session_id,
            "run_id": state.run_pk,
            "created_at": datetime.fromtimestamp(summary.created_at, tz=UTC),
            **message_fields(summary),
        }
        row["attributes"] = {**row["attributes"], "compaction_summary": True}
        for attempt in range(2):
            try:
                await retrying(_store_compaction, state.next_seq, row, compressed)
                state.next_seq += 1
                return
            except IntegrityError:
                if attempt:
                    raise
                last = await (
                    Message.objects.filter(session_id=context.session_id)
                    .order_by("-seq")
                    .values_list("seq", flat=True)
                    .afirst()
                )
                state.next_seq = (last or 0) + 1

    async def _write(
        self, context: AgentRunContext, state: _StoreState, event: MessageAppendedEvent
    ) -> None:
        message = event.message
        usage = event.usage
        timing = event.timing
        row = {
            "session_id": context.session_id,
            "run_id": state.run_pk,
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "duration_ms": round(timing.duration * 1000) if timing else None,
            "created_at": datetime.fromtimestamp(message.created_at, tz=UTC),
            **message_fields(message),
        }
        for attempt in range(2):
            try:
                await _store_row(state.next_seq, row)
                state.next_seq += 1
                return
            except IntegrityError:
                if await Message.objects.filter(message_id=message.id).aexists():
                    log.info("message %s is already stored; not stored twice", message.id)
                    return
                if attempt:
                    raise
                # Another writer took our seq (an operator tool, a recovered run): move on.
                last = await (
                    Message.objects.filter(session_id=context.session_id)
                    .order_by("-seq")
                    .values_list("seq", flat=True)
                    .afirst()
                )
                state.next_seq = (last or 0) + 1


def create_rows_now(rows: list[tuple[int, dict[str, Any]]]) -> list[None | Exception]:
    """Message rows (seq, fields) of the runs appending at one moment, in one INSERT.

    A conflict (another writer took a seq) sends each row alone, so only its run sees the
    IntegrityError and moves on to a fresh seq.
    """
    return each_alone_if_whole_fails(_insert_rows, rows)


def _insert_rows(rows: list[tuple[int, dict[str, Any]]]) -> list[None | Exception]:
    with transaction.atomic():
        insert_rows([Message(seq=seq, **fields) for seq, fields in rows])
    return [None] * len(rows)


_create_rows = db_hop(create_rows_now)
_row_writers: PerLoop[GroupCommit[tuple[int, dict[str, Any]], None]] = PerLoop()


async def _store_row(seq: int, row: dict[str, Any]) -> None:
    """Write one message row, in one hop with the others waiting then (agents.group_commit)."""
    await _row_writers.get(lambda: GroupCommit(_create_rows)).submit((seq, row))


def _store_compaction(seq: int, row: dict[str, Any], compressed: list[str]) -> None:
    """The summary row and the marks on what it summarises, in one transaction."""
    with transaction.atomic():
        summary = Message.objects.create(seq=seq, **row)
        Message.objects.filter(session_id=row["session_id"], message_id__in=compressed).update(
            summarized_by=summary
        )


def _in_context(rows: list[Message]) -> list[Message]:
    """The rows the model context holds: each summary in place of what it summarised.

    A summarised row is left out; the summary that (through later compactions, the
    outermost one) stands for it takes the place of the first such row.
    """
    parent = {row.pk: row.summarized_by_id for row in rows}
    by_pk = {row.pk: row for row in rows}

    def root(pk: int) -> int:
        seen: set[int] = set()
        while parent.get(pk) is not None and pk not in seen:
            seen.add(pk)
            pk = parent[pk]  # type: ignore[assignment]
        return pk

    placed: set[int] = set()
    result: list[Message] = []
    for row in rows:
        if row.summarized_by_id is not None:
            summary = root(row.pk)
            if summary not in placed and summary in by_pk:
                placed.add(summary)
                result.append(by_pk[summary])
        elif row.pk not in placed:
            placed.add(row.pk)
            result.append(row)
    return result


def _is_instruction(message: AnyMessage) -> bool:
    return isinstance(message, SystemMessage) and not message.include_in_messages


def load_history(session_id: str, request_id: str) -> History:
    """The session's rows and the request's Run pk, in one hop to the ORM thread."""
    run_pk = Run.objects.filter(request_id=request_id).values_list("pk", flat=True).first()
    return session_rows(session_id), run_pk


def session_rows(session_id: str) -> list[Message]:
    """Every message row of the session in order (sync: call it on the ORM thread)."""
    return list(Message.objects.filter(session_id=session_id).order_by("seq"))


async def _write_uncancellable(write: Coroutine[Any, Any, None]) -> None:
    """Finish a started write even if the run is cancelled meanwhile, then re-raise.

    Cancelling mid-write would leave a row of unknown state behind; finishing it
    keeps the per-session seq consistent for the cancelled results that follow.
    """
    task = asyncio.ensure_future(write)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise


# -- runtime message <-> Message row ------------------------------------------------------


def message_fields(message: AnyMessage) -> dict[str, Any]:
    """Model fields of a Message row for one runtime message."""
    fields: dict[str, Any] = {
        "message_id": message.id,
        "role": message.role,
        "content": message.content,
        "include_in_messages": message.include_in_messages,
        "attributes": message.attributes,
    }
    if isinstance(message, AssistantMessage):
        fields["reasoning"] = message.reasoning or ""
        fields["tool_calls"] = [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ]
    elif isinstance(message, ToolMessage):
        fields["tool_call_id"] = message.tool_call_id
        fields["tool_name"] = message.name
        fields["is_error"] = message.is_error
        fields["skipped"] = message.skipped
    return fields


def row_to_message(row: Message) -> AnyMessage:
    """The runtime message a persisted row stands for (same id and attributes)."""
    common: dict[str, Any] = {
        "id": row.message_id,
        "created_at": row.created_at.timestamp(),
        "attributes": dict(row.attributes or {}),
        "include_in_messages": row.include_in_messages,
    }
    if row.role == Role.USER:
        return UserMessage(row.content, **common)
    if row.role == Role.ASSISTANT:
        calls = tuple(
            ToolCall(call["id"], call["name"], dict(call.get("arguments") or {}))
            for call in (row.tool_calls or [])
        )
        return AssistantMessage(
            row.content, tool_calls=calls, reasoning=row.reasoning or None, **common
        )
    if row.role == Role.TOOL:
        return ToolMessage(
            row.tool_call_id,
            row.tool_name,
            row.content,
            is_error=row.is_error,
            skipped=row.skipped,
            **common,
        )
    return SystemMessage(row.content, **common)
