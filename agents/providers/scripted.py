"""ScriptedModel: canned responses for tests; records every request it receives."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Union

from ..runtime.ids import new_uuid7
from ..runtime.messages import AssistantMessage, ToolCall
from ..runtime.model import ModelEvent, ModelRequest, ModelUsage
from ._streaming import estimate_tokens, stream_message

Step = Union[str, AssistantMessage, Exception, Callable[[ModelRequest], "Step"]]  # noqa: UP007 (recursive alias)


class ScriptExhausted(RuntimeError):
    """The scripted model was called more often than it has responses."""


def tool_call(name: str, arguments: dict | None = None, *, id: str | None = None) -> ToolCall:
    """Build a ToolCall for a script (a fresh id unless one is given)."""
    return ToolCall(
        id=id or f"call_{new_uuid7()[-12:]}", name=name, arguments=dict(arguments or {})
    )


class ScriptedModel:
    """Answers with the next scripted step on every call.

    A step is a str (a final text answer), an AssistantMessage (text and/or tool
    calls), an Exception (raised instead of answering) or a callable taking the
    ModelRequest and returning one of those. Text streams word by word; with
    ``delay`` each delta waits that many seconds, so tests can observe a run
    mid-stream. ``requests`` keeps every request, in order.
    """

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        delay: float = 0.0,
        repeat_last: bool = False,
        usage: ModelUsage | None = None,
    ) -> None:
        self.steps: list[Step] = list(steps)
        self.delay = delay
        self.repeat_last = repeat_last
        self.usage = usage
        self.requests: list[ModelRequest] = []
        self._position = 0

    @property
    def calls(self) -> int:
        return len(self.requests)

    def _next_step(self, request: ModelRequest) -> AssistantMessage:
        if self._position >= len(self.steps):
            if self.repeat_last and self.steps:
                step = self.steps[-1]
            else:
                raise ScriptExhausted(f"no scripted response left for call {self.calls}")
        else:
            step = self.steps[self._position]
            self._position += 1
        while callable(step) and not isinstance(step, (AssistantMessage, Exception)):
            step = step(request)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, str):
            return AssistantMessage(step)
        if isinstance(step, AssistantMessage):
            # A fresh identity per call: the same scripted step may be answered twice.
            duplicate = copy.copy(step)
            duplicate.id = new_uuid7()
            duplicate.attributes = dict(step.attributes)
            return duplicate
        raise TypeError(f"unsupported scripted step {step!r}")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        message = self._next_step(request)
        usage = self.usage or ModelUsage(
            input_tokens=sum(estimate_tokens(getattr(m, "content", "")) for m in request.messages),
            output_tokens=estimate_tokens(message.content),
        )
        async for event in stream_message(message, usage=usage, delay=self.delay):
            yield event


class GatedModel(ScriptedModel):
    """A ScriptedModel that waits on an asyncio.Event before each answer (for tests)."""

    def __init__(self, steps: Sequence[Step] = (), **kwargs: object) -> None:
        super().__init__(steps, **kwargs)  # type: ignore[arg-type]
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.entered.set()
        await self.gate.wait()
        async for event in super().stream(request):
            yield event
