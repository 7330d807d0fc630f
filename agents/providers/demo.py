"""DemoModel: an offline, deterministic model that shows every feature without a network.

It answers arithmetic by calling the ``calculator`` tool, questions about the time
by calling ``clock``, a message starting with ``ask:`` by asking the user the rest
through the ``ask_user`` tool, "wait 2 s 3 times" by calling the ``wait`` tool that often
(one model turn per call, then an answer), and anything else with a short reply that quotes
the user.
Text streams word by word with a configurable delay, after an optional first-token delay.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from ..runtime.ids import new_uuid7
from ..runtime.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage
from ..runtime.model import ModelEvent, ModelRequest, ModelUsage
from ._streaming import estimate_tokens, stream_message

_ARITHMETIC = re.compile(r"[-+(]*\d[\d\s.+\-*/%^()×]*[\d)]")
_OPERATOR = re.compile(r"\d\s*(\*\*|//|[-+*/%^×])\s*[-+(]*\d")
_TIME = re.compile(r"\b(time|clock|date|today|hour)\b", re.IGNORECASE)
_WAIT = re.compile(r"^wait (\d{1,2}(?:\.\d+)?) ?s(?: (\d{1,2}) times?)?\b", re.IGNORECASE)


def _find_expression(text: str) -> str | None:
    for match in _ARITHMETIC.finditer(text):
        candidate = match.group(0).strip()
        if _OPERATOR.search(candidate):
            return candidate
    return None


class DemoModel:
    """Deterministic offline model; ``delay`` seconds between streamed words.

    ``first_token_delay`` seconds pass before the first word of every model call, as a
    remote model's time to first token would.
    """

    def __init__(
        self, *, delay: float = 0.02, reply_words: int = 0, first_token_delay: float = 0.0
    ) -> None:
        if delay < 0 or first_token_delay < 0:
            raise ValueError("delays cannot be negative")
        self.delay = delay
        self.reply_words = reply_words  # pad plain replies (and wait turns) to this many words
        self.first_token_delay = first_token_delay

    def respond(self, request: ModelRequest) -> AssistantMessage:
        """The answer this model gives to a request (no I/O, no randomness)."""
        last = request.messages[-1] if request.messages else None
        offered = {definition.name for definition in request.tools}
        waiting = self._wait_turn(request, offered)
        if waiting is not None:
            return waiting
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

    def _wait_turn(self, request: ModelRequest, offered: set[str]) -> AssistantMessage | None:
        """For "wait S s [K times]": call ``wait`` until K calls have answered, then say so."""
        if "wait" not in offered:
            return None
        asked = None
        done = 0
        for message in reversed(request.messages):
            if isinstance(message, UserMessage):
                asked = _WAIT.match(message.content.strip())
                break
            if isinstance(message, ToolMessage) and message.name == "wait":
                done += 1
        if asked is None:
            return None
        seconds, times = float(asked.group(1)), int(asked.group(2) or 1)
        if done < times:
            intro = self._pad(f"Step {done + 1} of {times}: let me use the wait tool.")
            return self._call("wait", {"seconds": seconds}, intro=intro)
        return AssistantMessage(self._pad(f"Done: I waited {seconds:g} s {times} times."))

    def _pad(self, text: str) -> str:
        words = text.split(" ")
        filler = 0
        while len(words) < self.reply_words:
            filler += 1
            words.append(f"word{filler}")
        return " ".join(words)

    def _call(
        self, name: str, arguments: dict[str, object], *, intro: str = ""
    ) -> AssistantMessage:
        intro = intro or f"Let me use the {name} tool."
        return AssistantMessage(
            intro, tool_calls=(ToolCall(f"call_{new_uuid7()[-12:]}", name, arguments),)
        )

    def _reply(self, text: str) -> str:
        quoted = " ".join(text.split())
        if len(quoted) > 200:
            quoted = quoted[:200] + "…"
        return self._pad(
            f'You said: "{quoted}". I am the offline demo model, so I can only echo you, '
            "do arithmetic with the calculator tool and tell the time with the clock tool."
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        message = self.respond(request)
        usage = ModelUsage(
            input_tokens=sum(estimate_tokens(getattr(m, "content", "")) for m in request.messages),
            output_tokens=estimate_tokens(message.content),
        )
        if self.first_token_delay:
            await asyncio.sleep(self.first_token_delay)
        async for event in stream_message(message, usage=usage, delay=self.delay):
            yield event
