"""AskUserExtension: the ask_user tool, through which the model asks the user and waits.

Protocol (what the dashboard shows and sends):

- The model calls the tool ``ask_user`` with ``{"question": str (1..2000 characters),
  "choices": optional list of up to 20 str (1..500 characters each)}``. Invalid arguments
  become a failed ToolMessage the model reads; nobody is asked.
- Outward, when the question is put::

      AgentEvent(CUSTOM, name=ASK_USER_QUESTION,           # "ask_user.question"
                 data={"id": question_id, "question": ..., "choices": [...] | None,
                       "tool_call_id": ..., "timeout_seconds": 600.0,
                       "deadline": epoch_seconds})

  ``question_id`` is fresh for every question (not the tool call id). The same data (plus
  ``request_id``) is in ``pending_waits(session_id)`` while it is unanswered.
- Inward, the answer::

      agent.emit_external_event(
          ExternalEvent(ASK_USER_ANSWER,                   # "ask_user.answer"
                        {"id": question_id, "answer": str (1..10000), "by": optional str}),
          config=AgentRunConfig(session_id=..., request_id=...))

  Choices are suggestions: any answer text is accepted. An unknown, answered or foreign
  id and a malformed payload return [] and change nothing.
- Outward, once settled: ``ASK_USER_ANSWERED`` ("ask_user.answered", data ``{"id",
  "answer", "by"}``) and the tool returns the answer text as its result; or, when no answer
  came within the timeout, ``ASK_USER_EXPIRED`` ("ask_user.expired", data ``{"id",
  "timeout_seconds"}``) and the tool fails with "No answer within N s".
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..runtime.events import AgentEvent, AgentEventType
from ..runtime.external import ExternalEventExtension, ExternalWaitClosed
from ..runtime.ids import new_uuid7
from ..runtime.operator import ActionSpec, WaitSpec
from ..runtime.tools import AgentTool, ToolResult
from .settings import AskUserSettings

if TYPE_CHECKING:
    from ..runtime.context import AgentRunContext
    from ..runtime.extension import ToolCallNext
    from ..runtime.messages import ToolCall

ASK_USER_TOOL = "ask_user"
ASK_USER_QUESTION = "ask_user.question"
ASK_USER_ANSWER = "ask_user.answer"
ASK_USER_ANSWERED = "ask_user.answered"
ASK_USER_EXPIRED = "ask_user.expired"

MAX_QUESTION_LENGTH = 2000
MAX_CHOICES = 20
MAX_CHOICE_LENGTH = 500
MAX_ANSWER_LENGTH = 10_000
MAX_OPERATOR_LENGTH = 200

Choice = Annotated[str, Field(min_length=1, max_length=MAX_CHOICE_LENGTH)]


class AskUserArguments(BaseModel):
    """The ask_user tool's arguments, as the model sends them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(min_length=1, max_length=MAX_QUESTION_LENGTH)
    choices: list[Choice] | None = Field(default=None, max_length=MAX_CHOICES)

    @field_validator("question")
    @classmethod
    def _not_blank(cls, question: str) -> str:
        if not question.strip():
            raise ValueError("the question is blank")
        return question


class UserAnswer(BaseModel):
    """One answer, as carried by an ExternalEvent named ASK_USER_ANSWER."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)  # the question id from ASK_USER_QUESTION
    answer: str = Field(min_length=1, max_length=MAX_ANSWER_LENGTH)
    by: str | None = Field(default=None, max_length=MAX_OPERATOR_LENGTH)  # who answered


ASK_USER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUESTION_LENGTH,
            "description": "The question, complete enough to answer without other context.",
        },
        "choices": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_CHOICE_LENGTH},
            "maxItems": MAX_CHOICES,
            "description": "Optional suggested answers; the user may still answer freely.",
        },
    },
    "required": ["question"],
    "additionalProperties": False,
}

ASK_USER_DESCRIPTION = (
    "Ask the user a question and wait for the answer. Use it only when you need information "
    "or a decision that only the user can give; the answer is returned as text."
)


class AskUserExtension(ExternalEventExtension):
    """Registers ``ask_user`` for every request and routes each answer to its question.

    The tool is built per request around that request's context, so concurrent sessions
    sharing one instance never see each other's questions; waits are keyed by (session id,
    question id).
    """

    event_names: ClassVar[frozenset[str]] = frozenset({ASK_USER_ANSWER})
    operator_actions: ClassVar[tuple[ActionSpec, ...]] = (
        ActionSpec("answer", ASK_USER_ANSWER, fields={"id": "id", "answer": "answer"}),
    )
    operator_waits: ClassVar[tuple[WaitSpec, ...]] = (
        WaitSpec(
            "question",
            ASK_USER_QUESTION,
            frozenset({ASK_USER_ANSWERED, ASK_USER_EXPIRED}),
            fields=("question", "choices"),
        ),
    )
    settings_model: ClassVar[type[AskUserSettings]] = AskUserSettings

    def __init__(self, settings: AskUserSettings | None = None, **fields: Any) -> None:
        if settings is not None and fields:
            raise TypeError("pass either an AskUserSettings or its fields, not both")
        self.settings = settings if settings is not None else AskUserSettings(**fields)

    def parse_response(self, payload: Mapping[str, Any]) -> UserAnswer:
        return UserAnswer.model_validate(dict(payload))

    async def on_tool(self, context: AgentRunContext) -> None:
        """Register this request's ask_user tool (a name already taken fails the request)."""

        async def ask_user(question: str, choices: list[str] | None = None) -> ToolResult:
            return await self._ask(context, question, choices)

        context.register_tool(
            AgentTool(
                ASK_USER_TOOL,
                ask_user,
                description=ASK_USER_DESCRIPTION,
                parameters=ASK_USER_PARAMETERS,
                validator=AskUserArguments,
            )
        )

    async def on_tool_call(
        self, context: AgentRunContext, call: ToolCall, call_next: ToolCallNext
    ) -> ToolResult:
        """Note which tool call is asking, so the question can name it (calls run one by one)."""
        if call.name != ASK_USER_TOOL:
            return await call_next(call)
        key = self._call_key()
        context.metadata[key] = call.id
        try:
            return await call_next(call)
        finally:
            context.metadata.pop(key, None)

    def _call_key(self) -> str:
        return f"{self.name}.tool_call_id"

    async def _ask(
        self, context: AgentRunContext, question: str, choices: list[str] | None
    ) -> ToolResult:
        question_id = new_uuid7()
        timeout = self.settings.timeout_seconds
        data = {
            "question": question,
            "choices": list(choices) if choices is not None else None,
            "tool_call_id": context.metadata.get(self._call_key()),
            "timeout_seconds": timeout,
            "deadline": time.time() + timeout,
        }
        self.open_wait(context, question_id, data)
        await context.emit(
            AgentEvent(
                AgentEventType.CUSTOM, name=ASK_USER_QUESTION, data={"id": question_id, **data}
            )
        )
        try:
            answer: UserAnswer = await self.wait_for(context, question_id, timeout=timeout)
        except TimeoutError:
            await context.emit(
                AgentEvent(
                    AgentEventType.CUSTOM,
                    name=ASK_USER_EXPIRED,
                    data={"id": question_id, "timeout_seconds": timeout},
                )
            )
            return ToolResult(
                content=f"No answer within {timeout:g} s",
                is_error=True,
                attributes={"ask_user": "timeout", "question_id": question_id},
            )
        except ExternalWaitClosed:
            return ToolResult(
                content="No answer: the question was withdrawn",
                is_error=True,
                attributes={"ask_user": "closed", "question_id": question_id},
            )
        await context.emit(
            AgentEvent(
                AgentEventType.CUSTOM,
                name=ASK_USER_ANSWERED,
                data={"id": question_id, "answer": answer.answer, "by": answer.by},
            )
        )
        return ToolResult(
            content=answer.answer,
            data=answer.answer,
            attributes={"ask_user": "answered", "question_id": question_id, "by": answer.by},
        )
