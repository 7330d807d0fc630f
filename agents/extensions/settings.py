"""Settings models of the operator-facing extensions: tool approval, ask_user and steering.

The admin catalog validates an ``ExtensionSetting.settings`` JSON object with these models
before an extension is built from it, so a typo in a key is an error rather than a silently
ignored option (``extra="forbid"``). Each extension takes either an instance of its model or
the model's fields as keyword arguments.
"""

from __future__ import annotations

from typing import Annotated

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
