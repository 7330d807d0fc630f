"""History repair: keep a restored conversation valid for providers."""

from __future__ import annotations

from collections.abc import Iterable

from .messages import AnyMessage, AssistantMessage, ToolMessage

INTERRUPTED_TOOL_CONTENT = "Not completed: the request ended before this tool call returned."


def close_dangling_tool_calls(messages: Iterable[AnyMessage]) -> list[AnyMessage]:
    """Return the messages with a result after every tool call that never got one.

    A request that failed (or whose host died) can leave an assistant tool call
    without its ToolMessage; providers reject such a history. The inserted
    results are request-scoped (not persisted), placed right after the calls.
    """
    result: list[AnyMessage] = []
    open_calls: dict[str, tuple[str, int]] = {}

    def close_open() -> None:
        for call_id, (name, _) in list(open_calls.items()):
            result.append(
                ToolMessage(
                    call_id,
                    name,
                    INTERRUPTED_TOOL_CONTENT,
                    is_error=True,
                    persist=False,
                    attributes={"interrupted": True},
                )
            )
        open_calls.clear()

    for message in messages:
        if isinstance(message, ToolMessage):
            open_calls.pop(message.tool_call_id, None)
            result.append(message)
            continue
        if open_calls:
            close_open()
        result.append(message)
        if isinstance(message, AssistantMessage):
            for index, call in enumerate(message.tool_calls):
                open_calls[call.id] = (call.name, index)
    if open_calls:
        close_open()
    return result
