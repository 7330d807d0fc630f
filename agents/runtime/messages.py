"""Conversation messages: what the model sees and what persistence stores."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .ids import new_uuid7


def _now() -> float:
    return time.time()


@dataclass(slots=True, frozen=True)
class ToolCall:
    """One tool invocation requested by the model."""

    id: str  # provider-assigned call id, echoed back by the ToolMessage
    name: str  # registered tool name
    arguments: dict[str, Any] = field(default_factory=dict)  # decoded JSON arguments

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("ToolCall.id must be a non-empty string")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("ToolCall.name must be a non-empty string")
        if not isinstance(self.arguments, dict):
            raise TypeError("ToolCall.arguments must be a dict")


@dataclass(slots=True, kw_only=True)
class _MessageBase:
    id: str = field(default_factory=new_uuid7)  # stable identity across restore and storage
    created_at: float = field(default_factory=_now)  # POSIX seconds
    attributes: dict[str, Any] = field(default_factory=dict)  # extension-owned metadata
    persist: bool = True  # False: storage subscribers skip it
    include_in_messages: bool = True  # False: it belongs to the current request only

    def _check_base(self) -> None:
        if not isinstance(self.attributes, dict):
            raise TypeError("attributes must be a dict")


@dataclass(slots=True)
class SystemMessage(_MessageBase):
    """Instructions for the model; rebuilt for every request by default."""

    content: str
    include_in_messages: bool = field(default=False, kw_only=True)

    role = "system"

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise TypeError("SystemMessage.content must be a str")
        self._check_base()


@dataclass(slots=True)
class UserMessage(_MessageBase):
    """Input from the person (or a steering operator)."""

    content: str

    role = "user"

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise TypeError("UserMessage.content must be a str")
        self._check_base()


@dataclass(slots=True)
class AssistantMessage(_MessageBase):
    """One complete model answer: text, optional reasoning, requested tool calls."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None

    role = "assistant"

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise TypeError("AssistantMessage.content must be a str")
        self.tool_calls = tuple(self.tool_calls)
        for call in self.tool_calls:
            if not isinstance(call, ToolCall):
                raise TypeError("AssistantMessage.tool_calls must hold ToolCall objects")
        self._check_base()


@dataclass(slots=True)
class ToolMessage(_MessageBase):
    """The result of one tool call, as the model will read it."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False  # the call failed, was denied, timed out or was cancelled
    skipped: bool = False  # steering skipped the call before it ran

    role = "tool"

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise TypeError("ToolMessage.content must be a str")
        self._check_base()


AnyMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage

MESSAGE_TYPES: tuple[type, ...] = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def copy_message(message: AnyMessage) -> AnyMessage:
    """Return an independent copy: same identity, own attributes and tool-call arguments."""
    import copy

    duplicate = copy.copy(message)
    # Most messages carry no attributes: skip deepcopy's machinery for the common case.
    duplicate.attributes = copy.deepcopy(message.attributes) if message.attributes else {}
    if isinstance(duplicate, AssistantMessage) and duplicate.tool_calls:
        # ToolCall is frozen but its arguments dict is not; sharing it would let one
        # request's edits leak into remembered history.
        duplicate.tool_calls = tuple(
            ToolCall(call.id, call.name, copy.deepcopy(call.arguments))
            for call in duplicate.tool_calls
        )
    return duplicate
