"""DemoModel: an offline, deterministic model that shows every feature without a network.

It answers arithmetic by calling the ``calculator`` tool, questions about the time
by calling ``clock``, a message starting with ``ask:`` by asking the user the rest
through the ``ask_user`` tool, and anything else with a short reply that quotes the
user.
Text streams word by word with a configurable delay.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from ..runtime.ids import new_uuid7
from ..runtime.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage
from ..runtime.model import ModelEvent, ModelRequest, ModelUsage
from ._streaming import estimate_tokens, stream_message

_ARITHMETIC = re.compile(r"[-+(]*\d[\d\s.+\-*/%^()×]*[\d)]")
_OPERATOR = re.compile(r"\d\s*(\*\*|//|[-+*/%^×])\s*[-+(]*\d")
_TIME = re.compile(r"\b(time|clock|date|today|hour)\b", re.IGNORECASE)


def _find_expression(text: str) -> str | None:
    for match in _ARITHMETIC.finditer(text):
        candidate = match.group(0).strip()
        if _OPERATOR.search(candidate):
            return candidate
    return None


class DemoModel:
    """Deterministic offline model; ``delay`` seconds between streamed words."""

    def __init__(self, *, delay: float = 0.02, reply_words: int = 0) -> None:
        if delay < 0:
            raise ValueError("delay cannot be negative")
        self.delay = delay
        self.reply_words = reply_words  # pad plain replies to at least this many words

    def respond(self, request: ModelRequest) -> AssistantMessage:
        """The answer this model gives to a request (no I/O, no randomness)."""
        last = request.messages[-1] if request.messages else None
        offered = {definition.name for definition in request.tools}
        if isinstance(last, ToolMessage):
            if last.is_error:
                return AssistantMessage(f"The {last.name} tool reported a problem: {last.content}")
            if last.name == "calculator":
                return AssistantMessage(f"The result is {last.content}.")
            if last.name == "clock":
                return AssistantMessage(f"It is {last.content}.")
            return AssistantMessage(f"The {last.name} tool returned: {last.content}")
        text = last.content if isinstance(last, UserMessage) else ""
        question = text.strip()
        if question[:4].lower() == "ask:" and question[4:].strip() and "ask_user" in offered:
            return self._call("ask_user", {"question": question[4:].strip()})
        expression = _find_expression(text)
        if expression and "calculator" in offered:
            return self._call("calculator", {"expression": expression})
        if _TIME.search(text) and "clock" in offered:
            return self._call("clock", {"timezone": "UTC"})
        return AssistantMessage(self._reply(text))

    def _call(self, name: str, arguments: dict[str, str]) -> AssistantMessage:
        intro = f"Let me use the {name} tool."
        return AssistantMessage(
            intro, tool_calls=(ToolCall(f"call_{new_uuid7()[-12:]}", name, arguments),)
        )

    def _reply(self, text: str) -> str:
        quoted = " ".join(text.split())
        if len(quoted) > 200:
            quoted = quoted[:200] + "…"
        reply = (
            f'You said: "{quoted}". I am the offline demo model, so I can only echo you, '
            "do arithmetic with the calculator tool and tell the time with the clock tool."
        )
        words = reply.split(" ")
        filler = 0
        while len(words) < self.reply_words:
            filler += 1
            words.append(f"word{filler}")
        return " ".join(words)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        message = self.respond(request)
        usage = ModelUsage(
            input_tokens=sum(estimate_tokens(getattr(m, "content", "")) for m in request.messages),
            output_tokens=estimate_tokens(message.content),
        )
        async for event in stream_message(message, usage=usage, delay=self.delay):
            yield event
