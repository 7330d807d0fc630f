"""The public names of agents.runtime, pinned (ARCHITECTURE.md, "Public names")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agents.runtime
from agents.extensions import memory

REPO = Path(__file__).resolve().parents[2]

DOCUMENTED = {
    "Agent",
    "AgentRunConfig",
    "AgentState",
    "AgentRunContext",
    "AgentExtension",
    "AgentPhase",
    "AgentEvent",
    "AgentEventType",
    "ExtensionEvent",
    "MessageAppendedEvent",
    "CompactionEvent",
    "RunCancelledEvent",
    "ExternalEvent",
    "ExternalEventExtension",
    "SystemMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolMessage",
    "ToolCall",
    "AnyMessage",
    "AgentModel",
    "ModelRequest",
    "ModelEvent",
    "ModelResponse",
    "ModelUsage",
    "ToolDefinition",
    "ServerToolDefinition",
    "AgentTool",
    "tool",
    "ToolResult",
    "AgentProtocolError",
    "ModelCallError",
    "InMemoryMessageAccumulator",
}

# Public beyond ARCHITECTURE's list: each was added on purpose, so a new or vanished name
# fails the exact comparison below until this set says so.
EXTRA = {
    "ExternalWaitClosed",
    "MaxIterationsExceeded",
    "MessageTiming",
    "RunHandle",
    "ToolArgumentsError",
    "ToolCallDelta",
    "UnknownToolError",
}


def test_all_is_exactly_the_documented_names_and_the_pinned_extras() -> None:
    exported = set(agents.runtime.__all__)

    assert DOCUMENTED - exported == set()  # nothing documented is missing
    assert exported - DOCUMENTED - EXTRA == set()  # nothing public arrived unnoticed
    assert EXTRA <= exported  # and no pinned extra vanished


def test_every_name_in_all_is_importable_and_listed_once() -> None:
    exported = agents.runtime.__all__

    assert len(exported) == len(set(exported))
    missing = [name for name in exported if not hasattr(agents.runtime, name)]
    assert missing == []
    namespace: dict[str, object] = {}
    exec("from agents.runtime import *", namespace)
    assert set(exported) <= set(namespace)


def test_accumulator_is_re_exported_not_redefined() -> None:
    assert agents.runtime.InMemoryMessageAccumulator is memory.InMemoryMessageAccumulator


@pytest.mark.parametrize(
    "statement",
    [
        "from agents.extensions.memory import InMemoryMessageAccumulator",
        "from agents.runtime import InMemoryMessageAccumulator",
        "from agents.runtime.agent import Agent",
        "from agents.runtime.external import ExternalEventExtension",
        "from agents.extensions.demo_tools import DemoToolsExtension",
        "from agents.providers.scripted import ScriptedModel",
        "from agents.providers.demo import DemoModel",
    ],
)
def test_documented_import_works_as_the_first_import_of_a_process(statement: str) -> None:
    # Import cycles only show when a module is the first one a fresh interpreter loads.
    result = subprocess.run(
        [sys.executable, "-c", statement],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_built_in_extensions_import_from_the_package() -> None:
    import agents.extensions
    from agents.extensions import approval, ask_user, steering

    assert agents.extensions.ToolApprovalExtension is approval.ToolApprovalExtension
    assert agents.extensions.AskUserExtension is ask_user.AskUserExtension
    assert agents.extensions.SteeringExtension is steering.SteeringExtension
    assert agents.extensions.InMemoryMessageAccumulator is memory.InMemoryMessageAccumulator
    assert all(hasattr(agents.extensions, name) for name in agents.extensions.__all__)


def test_the_runtime_imports_nothing_from_the_extensions_package() -> None:
    # The default accumulator lives in the runtime; agents.extensions.memory re-exports it.
    probe = (
        "import sys, agents.runtime; "
        "print(sorted(m for m in sys.modules if m.startswith('agents.extensions')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert "__getattr__" not in vars(agents.runtime)
