"""DjangoSessionStore: every message of a run in the database, and history restored from it."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Message, Run
from agents.providers.scripted import ScriptedModel
from agents.runtime import (
    Agent,
    AgentExtension,
    AgentRunConfig,
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from agents.runtime.context import AgentRunContext
from agents.runtime.history import INTERRUPTED_TOOL_CONTENT
from agents.session_store import DjangoSessionStore

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_TOOLS = ("demo_tools", {"tools": ["calculator", "clock"]})
APPROVE_CALCULATOR = ("tool_approval", {"tools": ["calculator"]})


def scripted(*responses: str) -> dict[str, Any]:
    """Provider settings of the scripted provider: these answers, one per model call."""
    return {"responses": list(responses)}


async def _rows(session_id: str) -> list[Message]:
    return [m async for m in Message.objects.filter(session_id=session_id).order_by("seq")]


async def _run_to_end(manager: Any, session: Any, user: Any, text: str) -> Any:
    """Submit a message, wait for its run, return the hosted run (its agent stays reachable)."""
    reply = await manager.submit_message(session.id, user, text)
    assert reply.accepted, reply
    hosted = manager.hosted[session.id]
    await manager.wait_for_run(reply.request_id)
    return hosted


def _conversation(messages: Any) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages if not isinstance(m, SystemMessage)]


def _assert_every_call_answered(rows: list[Message]) -> None:
    calls = [call["id"] for m in rows if m.role == "assistant" for call in m.tool_calls]
    results = [m.tool_call_id for m in rows if m.role == "tool"]
    assert sorted(calls) == sorted(results)


async def test_a_run_stores_user_assistant_and_tool_messages_in_order(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)

    hosted = await _run_to_end(manager, session, user, "What is 2 + 3?")

    run = await Run.objects.aget(request_id=hosted.request_id)
    rows = await _rows(session.id)
    assert [(m.seq, m.role) for m in rows] == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
    ]
    assert all(m.run_id == run.pk for m in rows)
    user_row, call_row, tool_row, answer_row = rows
    assert user_row.content == "What is 2 + 3?"
    assert user_row.attributes == {"by": user.username}
    assert call_row.tool_calls == [
        {
            "id": call_row.tool_calls[0]["id"],
            "name": "calculator",
            "arguments": {"expression": "2 + 3"},
        }
    ]
    assert (tool_row.tool_call_id, tool_row.tool_name, tool_row.content) == (
        call_row.tool_calls[0]["id"],
        "calculator",
        "5",
    )
    assert not tool_row.is_error
    assert answer_row.content == "The result is 5."
    # Usage and timing land on the rows that produced them.
    for row in (call_row, answer_row):
        assert row.input_tokens > 0 and row.output_tokens > 0
        assert row.duration_ms is not None
    assert tool_row.duration_ms is not None
    assert (user_row.input_tokens, user_row.output_tokens) == (0, 0)
    assert run.input_tokens == call_row.input_tokens + answer_row.input_tokens
    assert run.output_tokens == call_row.output_tokens + answer_row.output_tokens
    # The stored message ids are the runtime's: the live frames and the rows agree.
    state_ids = [m.id for m in hosted.context.state.messages if m.persist]
    assert [m.message_id for m in rows] == state_ids


async def test_a_second_run_gives_the_model_the_stored_history(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(
        provider="scripted", provider_settings=scripted("First answer.", "Second answer.")
    )
    session = await make_session(user, profile)

    await _run_to_end(manager, session, user, "first question")
    hosted = await _run_to_end(manager, session, user, "second question")

    request = hosted.agent.model.requests[-1]
    assert isinstance(request.messages[0], SystemMessage)
    assert _conversation(request.messages) == [
        ("user", "first question"),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    rows = await _rows(session.id)
    assert [m.seq for m in rows] == [1, 2, 3, 4]
    assert [m.message_id for m in rows[:3]] == [m.id for m in request.messages[1:]]
    assert [m.content for m in rows] == [
        "first question",
        "First answer.",
        "second question",
        "Second answer.",
    ]
    runs = [r async for r in Run.objects.filter(session=session).order_by("created_at")]
    assert [m.run_id for m in rows] == [runs[0].pk, runs[0].pk, runs[1].pk, runs[1].pk]


async def test_the_demo_model_answers_from_restored_history_after_a_new_manager(
    user: Any, make_profile: Any, make_session: Any, channel_layer: Any
) -> None:
    """A new manager (a restarted server) knows nothing in memory; the database suffices."""
    from agents.hosting import RunManager

    profile = await make_profile(extensions=(DEMO_TOOLS,))
    session = await make_session(user, profile)
    first = RunManager()
    try:
        await _run_to_end(first, session, user, "What is 4 * 4?")
    finally:
        await first.close()
    second = RunManager()
    try:
        hosted = await _run_to_end(second, session, user, "thanks")
    finally:
        await second.close()

    rows = await _rows(session.id)
    assert [m.seq for m in rows] == list(range(1, 7))
    assert [m.content for m in rows][3] == "The result is 16."
    restored = [m for m in hosted.context.state.messages if not isinstance(m, SystemMessage)]
    assert [m.id for m in restored] == [m.message_id for m in rows]
    assert isinstance(restored[2], ToolMessage) and restored[2].content == "16"


async def test_messages_not_in_the_model_context_are_stored_but_not_restored(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(provider="scripted", provider_settings=scripted("Noted."))
    session = await make_session(user, profile)
    await Message.objects.acreate(
        session=session, seq=1, message_id="note-1", role="user", content="visible question"
    )
    await Message.objects.acreate(
        session=session,
        seq=2,
        message_id="note-2",
        role="assistant",
        content="a note for people, not for the model",
        include_in_messages=False,
    )
    # Request instructions are stored as a SystemMessage is by default: not dialogue.
    await Message.objects.acreate(
        session=session,
        seq=3,
        message_id="note-3",
        role="system",
        content="old instructions",
        include_in_messages=False,
    )
    # One an extension marked as part of the dialogue is replayed, in its place.
    await Message.objects.acreate(
        session=session, seq=4, message_id="note-4", role="system", content="a marked note"
    )

    hosted = await _run_to_end(manager, session, user, "next question")

    request = hosted.agent.model.requests[-1]
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You are a helpful assistant."),
        ("user", "visible question"),
        ("system", "a marked note"),
        ("user", "next question"),
    ]
    rows = await _rows(session.id)
    assert [(m.seq, m.message_id) for m in rows[:4]] == [
        (1, "note-1"),
        (2, "note-2"),
        (3, "note-3"),
        (4, "note-4"),
    ]
    assert [(m.seq, m.content) for m in rows[4:]] == [(5, "next question"), (6, "Noted.")]
    assert not rows[1].include_in_messages


async def test_a_dangling_tool_call_is_closed_so_the_next_run_works(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile(
        provider="scripted", provider_settings=scripted("Sorry, the last call was lost.")
    )
    session = await make_session(user, profile)
    # What a host that died mid-tool leaves behind: a call without a result.
    await Message.objects.acreate(
        session=session, seq=1, message_id="u1", role="user", content="What is 2 + 2?"
    )
    await Message.objects.acreate(
        session=session,
        seq=2,
        message_id="a1",
        role="assistant",
        content="Let me use the calculator tool.",
        tool_calls=[{"id": "call_lost", "name": "calculator", "arguments": {"expression": "2+2"}}],
    )

    hosted = await _run_to_end(manager, session, user, "hello again")

    run = await Run.objects.aget(request_id=hosted.request_id)
    assert run.status == "completed", run.error
    messages = [m for m in hosted.agent.model.requests[-1].messages]
    closing = messages[3]
    assert isinstance(messages[2], AssistantMessage) and messages[2].id == "a1"
    assert isinstance(closing, ToolMessage)
    assert (closing.tool_call_id, closing.is_error) == ("call_lost", True)
    assert closing.content == INTERRUPTED_TOOL_CONTENT
    assert isinstance(messages[4], UserMessage) and messages[4].content == "hello again"
    # The closing result is for the provider only; the rows continue without a gap.
    rows = await _rows(session.id)
    assert [(m.seq, m.role) for m in rows] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]


async def test_cancel_mid_tool_leaves_a_valid_conversation_with_gapless_seqs(
    manager: Any, user: Any, make_profile: Any, make_session: Any, listen_session: Any
) -> None:
    profile = await make_profile(extensions=(DEMO_TOOLS, APPROVE_CALCULATOR))
    session = await make_session(user, profile)
    listener = await listen_session(session.id)

    first = await manager.submit_message(session.id, user, "What is 8 / 2?")
    await listener.until(lambda f: f["type"] == "run.custom" and f["name"] == "approval.requested")
    cancelled = await manager.control(session.id, user, "cancel", {})
    assert cancelled.accepted, cancelled
    await listener.finished(first.request_id)

    rows = await _rows(session.id)
    assert [(m.seq, m.role) for m in rows] == [(1, "user"), (2, "assistant"), (3, "tool")]
    _assert_every_call_answered(rows)
    assert rows[2].is_error and rows[2].attributes.get("cancelled") is True
    # The next run continues the same conversation with the next seq numbers.
    second = await manager.submit_message(session.id, user, "never mind, hello")
    await listener.finished(second.request_id)
    rows = await _rows(session.id)
    assert [m.seq for m in rows] == [1, 2, 3, 4, 5]
    assert [m.role for m in rows[3:]] == ["user", "assistant"]
    assert (await Run.objects.aget(request_id=second.request_id)).status == "completed"
    _assert_every_call_answered(rows)


class _Interloper(AgentExtension):
    """Another writer (an operator's note, a recovered run) that stores a message of the session
    after the store read the history and before it writes: it takes the store's next seq."""

    priority = 50  # on_state after the store's (priority 10)

    async def on_state(self, context: AgentRunContext) -> None:
        last = await Message.objects.filter(session_id=context.session_id).acount()
        await Message.objects.acreate(
            session_id=context.session_id,
            seq=last + 1,
            message_id="interloper",
            role="assistant",
            content="a note stored by someone else",
            include_in_messages=False,
        )


async def test_a_seq_taken_by_another_writer_is_skipped_not_a_failed_run(
    user: Any, make_profile: Any, make_session: Any
) -> None:
    profile = await make_profile()
    session = await make_session(user, profile)
    await Message.objects.acreate(
        session=session, seq=1, message_id="u0", role="user", content="earlier"
    )
    agent = Agent(
        ScriptedModel(["Stored anyway."]), extensions=[DjangoSessionStore(), _Interloper()]
    )

    answer = await agent.run("next", config=AgentRunConfig(session_id=session.id))

    assert answer.content == "Stored anyway."
    rows = await _rows(session.id)
    assert [(m.seq, m.message_id, m.content) for m in rows] == [
        (1, "u0", "earlier"),
        (2, "interloper", "a note stored by someone else"),
        (3, rows[2].message_id, "next"),
        (4, answer.id, "Stored anyway."),
    ]


COMPACT_AFTER_FOUR = (
    "summary_compaction",
    {"auto": "messages", "threshold_messages": 4, "keep_last_messages": 2},
)


async def test_a_compaction_is_stored_and_the_next_run_restores_summary_and_kept_turns(
    manager: Any, user: Any, make_profile: Any, make_session: Any
) -> None:
    # The run's own (scripted) model writes the summary: its third answer.
    profile = await make_profile(
        provider="scripted",
        provider_settings=scripted("A1", "A2", "Q1 got A1.", "A3", "A4"),
        extensions=(COMPACT_AFTER_FOUR,),
    )
    session = await make_session(user, profile)
    await _run_to_end(manager, session, user, "Q1")
    await _run_to_end(manager, session, user, "Q2")

    hosted = await _run_to_end(manager, session, user, "Q3")  # 5 messages: compacts first

    summary_text = "Summary of the earlier conversation:\nQ1 got A1."
    assert _conversation(hosted.agent.model.requests[-1].messages) == [
        ("user", summary_text),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
    ]
    rows = await _rows(session.id)
    summary = next(r for r in rows if r.attributes.get("compaction_summary"))
    assert summary.content == summary_text
    assert [r.content for r in rows if r.summarized_by_id == summary.pk] == ["Q1", "A1"]
    assert [r.content for r in rows if r.pk != summary.pk] == ["Q1", "A1", "Q2", "A2", "Q3", "A3"]

    # A fresh store (a restart) restores from the database alone: summary in place of
    # what it summarised, the summarised rows left out.
    model = ScriptedModel(["A4"])
    agent = Agent(model, extensions=[DjangoSessionStore()])
    await agent.run("Q4", config=AgentRunConfig(session_id=str(session.id)))

    assert _conversation(model.requests[-1].messages) == [
        ("user", summary_text),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
        ("assistant", "A3"),
        ("user", "Q4"),
    ]


async def test_runs_appending_at_one_moment_share_one_hop_and_a_conflict_fails_only_its_own(
    user: Any, make_profile: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from asgiref.sync import SyncToAsync

    from agents import session_store

    profile = await make_profile()
    sessions = [await make_session(user, profile) for _ in range(6)]
    await Message.objects.acreate(
        session=sessions[3], seq=1, message_id="taken", role="user", content="someone else's"
    )
    hops: list[str] = []
    enter = SyncToAsync.__call__

    async def counting(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(self.func, "__qualname__", ""))
        return await enter(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)

    def row(session: Any, i: int) -> dict[str, Any]:
        return {"session_id": session.id, "message_id": f"m{i}", "role": "user", "content": "hi"}

    outcomes = await asyncio.gather(
        *(session_store._store_row(1, row(s, i)) for i, s in enumerate(sessions)),
        return_exceptions=True,
    )

    # One hop for the six (each alone only after the whole batch met the conflict).
    assert [name for name in hops if "create_rows" in name] == ["create_rows_now"]
    assert [type(o).__name__ for o in outcomes] == [
        "NoneType", "NoneType", "NoneType", "IntegrityError", "NoneType", "NoneType"
    ]  # fmt: skip
    stored = {m.message_id async for m in Message.objects.all()}
    assert stored == {"taken", "m0", "m1", "m2", "m4", "m5"}
