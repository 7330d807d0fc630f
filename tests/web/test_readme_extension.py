"""The README's extension example works as written: loaded by ZETT_EXTENSIONS, run by a profile."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.extensions.demo_tools import DemoToolsExtension
from agents.profiles import catalog
from agents.providers.scripted import ScriptedModel, tool_call
from agents.runtime import Agent, AgentRunConfig, AssistantMessage, ToolMessage

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def readme_extension(tmp_path: Path, settings: object) -> Iterator[str]:
    text = README.read_text()
    match = re.search(r"<!-- readme-example: tool_budget -->\s*```python\n(.*?)```", text, re.S)
    assert match, "the README lost its extension example"
    package = tmp_path / "myproject"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tool_budget.py").write_text(match.group(1))
    sys.path.insert(0, str(tmp_path))
    settings.ZETT_EXTENSIONS = ["myproject.tool_budget.ToolBudget"]  # type: ignore[attr-defined]
    catalog._configured.cache_clear()
    try:
        yield "tool_budget"
    finally:
        catalog._configured.cache_clear()
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("myproject")]:
            del sys.modules[name]


@pytest.mark.django_db
def test_readme_example_is_in_the_catalog_with_its_settings(readme_extension: str) -> None:
    spec = catalog.extension_catalog()[readme_extension]
    assert spec.label == "Tool budget"
    assert spec.defaults() == {"max_calls": 3}
    with pytest.raises(catalog.ProfileConfigError, match="max_calls"):
        spec.build({"max_calls": -1})


async def test_readme_example_refuses_calls_beyond_the_budget(readme_extension: str) -> None:
    row = catalog.ExtensionRow(readme_extension, settings={"max_calls": 1})
    extensions = catalog.build_extensions([row], persist=False)
    calls = [tool_call("calculator", {"expression": "1+1"}) for _ in range(2)]
    model = ScriptedModel([AssistantMessage("", tool_calls=tuple(calls)), "done"])
    agent = Agent(model, extensions=[*extensions, DemoToolsExtension()])
    await agent.run("add twice", config=AgentRunConfig(session_id="readme"))
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [r.content for r in results] == [
        "2",
        "Refused: the budget of 1 tool calls is spent.",
    ]
    budget_notes = [m.content for m in model.requests[0].messages if m.role == "system"]
    assert "You may call 1 more tool(s) in this request." in budget_notes
