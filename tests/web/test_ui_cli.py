"""manage.py agent in a terminal: questions and approvals asked there; timeouts end cleanly."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agents.models import AgentProfile, ChatSession, ExtensionSetting, Run

pytestmark = pytest.mark.django_db(transaction=True)


def profile(slug: str, *extensions: tuple[str, dict[str, Any]], delay: float = 0) -> AgentProfile:
    made = AgentProfile.objects.create(
        name=slug, slug=slug, provider="demo", provider_settings={"delay": delay}
    )
    for position, (key, settings) in enumerate(extensions):
        ExtensionSetting.objects.create(profile=made, key=key, settings=settings, position=position)
    return made


def agent(prompt: str, slug: str, typed: str, timeout: float = 10) -> str:
    out = io.StringIO()
    call_command(
        "agent", prompt, "--profile", slug, "--user", "alice", "--timeout", str(timeout),
        stdin=io.StringIO(typed), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    return out.getvalue()


def test_a_question_is_asked_in_the_terminal_and_the_typed_line_answers_it() -> None:
    profile("cli-ask", ("ask_user", {}))
    output = agent("ask: Which colour should the report use?", "cli-ask", "teal\n")
    assert "? Which colour should the report use?" in output
    assert "The ask_user tool returned: teal" in output
    assert Run.objects.get().status == "completed"


def test_a_tool_approval_is_asked_in_the_terminal_and_a_reason_denies_it() -> None:
    gated = (
        ("demo_tools", {"tools": ["calculator"]}),
        ("tool_approval", {"tools": ["calculator"]}),
    )
    profile("cli-approve", *gated)
    output = agent("what is 6*7?", "cli-approve", "y\n")
    assert '? approve calculator({"expression": "6*7"})?' in output
    assert "The result is 42." in output

    denied = agent("what is 6*7?", "cli-approve", "not today\n")
    assert "Denied by the operator: not today" in denied
    assert "The result is 42." not in denied


def test_end_of_input_while_a_question_waits_cancels_the_run_without_a_traceback() -> None:
    profile("cli-eof", ("ask_user", {}))
    with pytest.raises(CommandError, match="did not complete: cancelled"):
        agent("ask: Anyone there?", "cli-eof", "")
    run = Run.objects.get()
    assert run.status == "cancelled"
    assert ChatSession.objects.get().status == "idle"


def test_timeout_cancels_the_run_and_says_so() -> None:
    profile("cli-slow", delay=0.5)
    with pytest.raises(CommandError, match=r"timed out after 0.5 s"):
        agent(
            "say something long enough to outlast the timeout please",
            "cli-slow",
            "",
            timeout=0.5,
        )
    run = Run.objects.get()
    assert run.status == "cancelled"
