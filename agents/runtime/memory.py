"""InMemoryMessageAccumulator: remembered dialogue per session, inside one process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .events import CompactionEvent, ExtensionEvent, MessageAppendedEvent
from .extension import AgentExtension
from .history import close_dangling_tool_calls
from .messages import AnyMessage, SystemMessage, UserMessage, copy_message

if TYPE_CHECKING:
    from .context import AgentRunContext


class InMemoryMessageAccumulator(AgentExtension):
    """Retain replayable messages per session for later requests.

    Messages with ``include_in_messages=False`` belong to their request only: the
    system instructions (a SystemMessage's default) are rebuilt for every request
    and never remembered. A SystemMessage an extension marks
    ``include_in_messages=True`` is dialogue and is replayed in its place.
    One instance may serve many sessions at once; each keeps its own dialogue.
    """

    def __init__(self) -> None:
        self._dialogues: dict[str, list[AnyMessage]] = {}

    async def on_state(self, context: AgentRunContext) -> None:
        """Current instructions, then an independent copy of the remembered dialogue."""
        remembered = self._dialogues.get(context.session_id)
        if not remembered:
            return
        instructions = [m for m in context.state.messages if _is_instruction(m)]
        others = [m for m in context.state.messages if not _is_instruction(m)]
        restored = close_dangling_tool_calls(copy_message(m) for m in remembered)
        context.replace_messages([*instructions, *restored, *others], emit_new=False)

    async def on_event(self, context: AgentRunContext, event: ExtensionEvent) -> None:
        """Remember appended dialogue; after a compaction, replace it."""
        if isinstance(event, MessageAppendedEvent):
            message = event.message
            if message.include_in_messages:
                self._dialogues.setdefault(context.session_id, []).append(copy_message(message))
        elif isinstance(event, CompactionEvent):
            self._apply_compaction(context, event)

    def _apply_compaction(self, context: AgentRunContext, event: CompactionEvent) -> None:
        """Remember what the compaction left, in this order of preference.

        1. ``event.messages``, when the event carries the replacement dialogue;
        2. else the dialogue in ``context.state``, when the compaction rewrote it
           (it differs from what is remembered and is not empty): the hook's own
           wording is what the next request must see;
        3. else a generated summary message followed by the kept range.
        """
        session_id = context.session_id
        dialogue = self._dialogues.get(session_id, [])
        in_state = [m for m in context.state.messages if m.include_in_messages]
        if event.messages is not None:
            replacement = [copy_message(m) for m in event.messages]
        elif in_state and [m.id for m in in_state] != [m.id for m in dialogue]:
            replacement = [copy_message(m) for m in in_state]
        else:
            summary = UserMessage(
                f"Summary of the earlier conversation:\n{event.summary}",
                attributes={"compaction_summary": True},
            )
            kept = dialogue[event.kept_from - 1 : event.kept_to] if event.kept_to else []
            replacement = [summary, *kept]
        self._dialogues[session_id] = replacement

    def messages(self, session_id: str) -> tuple[AnyMessage, ...]:
        """The remembered dialogue of one session (no request-specific instructions)."""
        return tuple(copy_message(m) for m in self._dialogues.get(session_id, ()))

    def clear(self, session_id: str) -> None:
        """Forget one session; other sessions keep theirs."""
        self._dialogues.pop(session_id, None)


def _is_instruction(message: AnyMessage) -> bool:
    """A request-specific system instruction, rebuilt by every request."""
    return isinstance(message, SystemMessage) and not message.include_in_messages
