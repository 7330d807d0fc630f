"""SummaryCompactionExtension: the older part of a conversation becomes one summary message.

On ``Agent.compact`` (``on_compact``), and before a model call once the conversation
crosses the configured threshold (``before_turn``), the extension:

1. splits the dialogue (system instructions excluded) into an older part and a kept tail
   of at least ``keep_last_messages`` messages that begins at a user message, so a turn,
   and with it every tool call and its result, stays whole;
2. emits COMPACTION_STARTED and asks the summary model (the one given to the extension,
   else the run's ``context.model``) for a summary of the older part;
3. on success replaces the context by the summary (a UserMessage with attribute
   ``compaction_summary``) and the kept tail, publishes a CompactionEvent carrying the
   ranges, the summary and the replacement dialogue, and emits COMPACTION_COMPLETED with
   ``{"compacted": True, "summarized": n, "kept": k, "summary", "summary_id"}`` and the
   summary call's usage (so a host can count and price it);
4. on a provider error or an empty summary leaves the context as it was and emits
   COMPACTION_COMPLETED with ``{"compacted": False, "error": text}``.

The host gives the summary model as any object with ``stream(ModelRequest)``; this module
imports no provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..runtime.events import AgentEvent, AgentEventType, CompactionEvent
from ..runtime.extension import AgentExtension
from ..runtime.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from ..runtime.model import ModelRequest, ModelUsage
from .settings import SummaryCompactionSettings

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext

SUMMARY_ATTRIBUTE = "compaction_summary"
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


def estimate_tokens(messages: list[AnyMessage]) -> int:
    """About four characters a token, tool call arguments included."""
    characters = 0
    for message in messages:
        characters += len(getattr(message, "content", "") or "")
        for call in getattr(message, "tool_calls", ()):
            characters += len(call.name) + len(repr(call.arguments))
    return (characters + 3) // 4


def split_point(dialogue: list[AnyMessage], keep_last: int) -> int:
    """Index where the kept tail starts: at a user message, at least keep_last from the end.

    The current turn is always kept. 0 means nothing can be summarised.
    """
    start = max(0, len(dialogue) - keep_last)
    while start > 0 and (start == len(dialogue) or not isinstance(dialogue[start], UserMessage)):
        start -= 1
    return start


class SummaryCompactionExtension(AgentExtension):
    """Summarises the older part of the dialogue through a model and replaces it."""

    def __init__(
        self,
        settings: SummaryCompactionSettings | None = None,
        *,
        model: Any = None,
        **options: Any,
    ) -> None:
        self.settings = settings or SummaryCompactionSettings(**options)
        self.model = model

    def _model_data(self) -> dict[str, Any]:
        """Which model summarised, when it is not the run's own (so a host prices it right)."""
        if self.model is None or not self.settings.provider:
            return {}
        return {"summary_model": [self.settings.provider, self.settings.model or ""]}

    async def on_compact(self, context: AgentRunContext) -> None:
        await self.compact(context)

    async def before_turn(self, context: AgentRunContext) -> None:
        if self._crossed(context):
            await self.compact(context)

    def _crossed(self, context: AgentRunContext) -> bool:
        settings = self.settings
        dialogue = _dialogue(context)
        if settings.auto == "tokens":
            return estimate_tokens(dialogue) >= settings.threshold_tokens
        if settings.auto == "messages":
            return len(dialogue) >= settings.threshold_messages
        return False

    async def compact(self, context: AgentRunContext) -> bool:
        """Compact the context once; True when it was replaced."""
        messages = list(context.state.messages)
        instructions = [m for m in messages if _is_instruction(m)]
        dialogue = [m for m in messages if not _is_instruction(m)]
        start = split_point(dialogue, self.settings.keep_last_messages)
        if start == 0:
            return False
        older, kept = dialogue[:start], dialogue[start:]
        await context.emit(AgentEvent(AgentEventType.COMPACTION_STARTED))
        usage: list[ModelUsage] = []
        try:
            summary = (await self._summarise(context, older, usage)).strip()
            if not summary:
                raise ValueError("the summary model returned an empty summary")
        except Exception as error:  # noqa: BLE001 - any failure leaves the context unchanged
            await context.emit(
                AgentEvent(
                    AgentEventType.COMPACTION_COMPLETED,
                    data={
                        "compacted": False,
                        "error": f"{type(error).__name__}: {error}"[:500],
                        **self._model_data(),
                    },
                    usage=usage[0] if usage else None,
                )
            )
            return False
        message = UserMessage(SUMMARY_PREFIX + summary, attributes={SUMMARY_ATTRIBUTE: True})
        await context.publish(
            CompactionEvent(
                compressed_from=1,
                compressed_to=len(older),
                kept_from=len(older) + 1 if kept else 0,
                kept_to=len(dialogue) if kept else 0,
                summary=summary,
                messages=(message, *kept),
            )
        )
        # Published before the context changes: a store maps the compressed positions
        # onto the messages still in context.state.
        context.replace_messages([*instructions, message, *kept], emit_new=False)
        await context.emit(
            AgentEvent(
                AgentEventType.COMPACTION_COMPLETED,
                data={
                    "compacted": True,
                    "summarized": len(older),
                    "kept": len(kept),
                    "summary": summary,
                    "summary_id": message.id,
                    "kept_first_id": kept[0].id if kept else None,
                    **self._model_data(),
                },
                usage=usage[0] if usage else None,
            )
        )
        return True

    async def _summarise(
        self, context: AgentRunContext, older: list[AnyMessage], usage: list[ModelUsage]
    ) -> str:
        """The summary text; the call's usage (when reported) is appended to ``usage``."""
        model = self.model if self.model is not None else context.model
        if model is None:
            raise RuntimeError("no summary model")
        request = ModelRequest(
            messages=(
                SystemMessage(self.settings.instruction),
                UserMessage(_transcript(older)),
            ),
            session_id=context.session_id,
            request_id=context.request_id,
        )
        text: list[str] = []
        final = ""
        async for event in model.stream(request):
            if event.kind == "text":
                text.append(event.delta)
            elif event.kind == "completed" and event.response is not None:
                final = event.response.message.content
                if event.response.usage is not None:
                    usage.append(event.response.usage)
        return final or "".join(text)


def _dialogue(context: AgentRunContext) -> list[AnyMessage]:
    return [m for m in context.state.messages if not _is_instruction(m)]


def _is_instruction(message: AnyMessage) -> bool:
    return isinstance(message, SystemMessage) and not message.include_in_messages


def _transcript(messages: list[AnyMessage]) -> str:
    """The older part as plain text for the summary model."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            lines.append(f"[tool {message.name} result] {message.content}")
        elif isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"[assistant] {message.content}")
            for call in message.tool_calls:
                lines.append(f"[assistant calls {call.name}] {call.arguments}")
        else:
            lines.append(f"[{message.role}] {getattr(message, 'content', '')}")
    return "\n".join(lines)
