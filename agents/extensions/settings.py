"""Settings models of the operator-facing extensions: tool approval, ask_user and steering.

The admin catalog validates an ``ExtensionSetting.settings`` JSON object with these models
before an extension is built from it, so a typo in a key is an error rather than a silently
ignored option (``extra="forbid"``). Each extension takes either an instance of its model or
the model's fields as keyword arguments.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

#: A wait longer than a day is almost certainly a misconfiguration: the run (and its
#: session) stays blocked for the whole wait.
MAX_WAIT_SECONDS = 86_400.0

Pattern = Annotated[str, Field(min_length=1, max_length=200)]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolApprovalSettings(_Settings):
    """Which tool calls wait for an operator's approval, and for how long."""

    tools: list[Pattern] = Field(
        default_factory=lambda: ["*"],
        description=(
            "fnmatch patterns (case-sensitive) naming the tools whose calls need approval. "
            'The default "*" gates every tool: an unlisted tool runs without asking, so the '
            "safe default is to ask for all of them and narrow the list deliberately."
        ),
    )
    exempt: list[Pattern] = Field(
        default_factory=lambda: ["ask_user"],
        description=(
            "fnmatch patterns of tools that never need approval even when `tools` matches "
            "them. The default exempts ask_user, which runs no code: it only asks the user."
        ),
    )
    timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        le=MAX_WAIT_SECONDS,
        description=(
            "How long a call waits for a decision, counted from the answer that requested "
            "it. When it passes the call is not run and is recorded as a timeout."
        ),
    )


class AskUserSettings(_Settings):
    """How long the ask_user tool waits for the user's answer."""

    timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        le=MAX_WAIT_SECONDS,
        description="How long a question waits for an answer before the tool reports failure.",
    )


class SteeringSettings(_Settings):
    """Steering has no options; the model exists so the catalog treats every extension alike."""


DEFAULT_SUMMARY_INSTRUCTION = (
    "Summarise the conversation below for the assistant that continues it. Keep every fact, "
    "decision, open question and tool result the rest of the conversation may need; "
    "leave out greetings and repetition. Answer with the summary only."
)


class SummaryCompactionSettings(_Settings):
    """When and how the older part of a conversation is replaced by a model-written summary."""

    auto: Literal["tokens", "messages", "never"] = Field(
        default="tokens",
        description=(
            "Compact automatically before a model call once the conversation crosses "
            "threshold_tokens (estimated, about four characters a token) or threshold_messages; "
            '"never" compacts only when asked.'
        ),
    )
    threshold_tokens: int = Field(default=60_000, ge=100, le=10_000_000)
    threshold_messages: int = Field(default=200, ge=2, le=100_000)
    keep_last_messages: int = Field(
        default=6,
        ge=0,
        le=10_000,
        description=(
            "At least this many of the latest messages stay verbatim; the kept part always "
            "begins at a user message, so a tool call is never separated from its result."
        ),
    )
    instruction: str = Field(default=DEFAULT_SUMMARY_INSTRUCTION, min_length=1, max_length=10_000)
    provider: str | None = Field(
        default=None,
        max_length=200,
        description="Provider of the summary model; the host resolves it (default: the run's).",
    )
    model: str | None = Field(default=None, max_length=200)
