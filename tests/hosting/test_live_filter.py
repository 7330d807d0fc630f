"""LiveFilter: which live frames are news to a socket that started from a snapshot.

Pure: a Snapshot is built by hand and frames are plain dicts, as the session group carries them.
"""

from __future__ import annotations

from typing import Any

from agents.hosting import Partial, Snapshot
from agents.web.live import LiveFilter

ACTIVE = "req-active"
OLD = "req-old"


def _message(message_id: str, request_id: str, role: str = "assistant") -> dict[str, Any]:
    return {"id": message_id, "request_id": request_id, "role": role, "content": message_id}


def _snapshot(*, partial: Partial | None = None, seq: int = 5, persisted: int = 1) -> Snapshot:
    return Snapshot(
        messages=[_message("m-old-user", OLD, "user"), _message("m-old-answer", OLD)],
        run={"request_id": ACTIVE, "status": "running"},
        partial=partial,
        seq=seq,
        persisted_iterations=persisted,
    )


def _delta(text: str, offset: int | None, *, iteration: int = 2, seq: int = 9) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "run.delta",
        "request_id": ACTIVE,
        "seq": seq,
        "kind": "text",
        "text": text,
        "iteration": iteration,
    }
    if offset is not None:
        frame["offset"] = offset
    return frame


def test_a_message_is_news_once_and_never_when_the_snapshot_shows_it() -> None:
    live = LiveFilter(_snapshot())
    assert not live.first_sight(_message("m-old-answer", OLD))
    new = _message("m-new", ACTIVE)
    assert live.first_sight(new)
    # The same message again (run.message, then run.tool's result, then a repeat): shown once.
    assert not live.first_sight(new)
    assert not live.first_sight(dict(new))
    assert not live.first_sight({"content": "no id"})


def test_frames_the_snapshot_covers_are_stale_and_later_ones_fresh() -> None:
    live = LiveFilter(_snapshot(seq=5))
    assert not live.fresh({"request_id": ACTIVE, "seq": 4})
    assert not live.fresh({"request_id": ACTIVE, "seq": 5})
    assert live.fresh({"request_id": ACTIVE, "seq": 6})
    assert live.fresh({"request_id": "req-next", "seq": 1})  # a run that started after it


def test_frames_of_a_settled_run_are_dropped_and_a_finished_run_settles() -> None:
    live = LiveFilter(_snapshot())
    assert not live.fresh({"request_id": OLD, "seq": 99})
    assert live.fresh({"request_id": ACTIVE, "seq": 6})
    live.finish(ACTIVE)
    assert not live.fresh({"request_id": ACTIVE, "seq": 7})


def test_model_calls_whose_answer_is_stored_are_not_streamed_again() -> None:
    live = LiveFilter(_snapshot(persisted=1))
    assert live.persisted({"request_id": ACTIVE, "iteration": 1})
    assert not live.persisted({"request_id": ACTIVE, "iteration": 2})


def test_a_delta_continues_the_snapshot_s_partial_exactly() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello")))
    assert live.open_stream(ACTIVE, 2) is None  # the snapshot's bubble is already open
    assert live.delta_text(ACTIVE, 2, "text", _delta(" world", 5)) == " world"
    assert live.delta_text(ACTIVE, 2, "text", _delta("!", 11)) == "!"


def test_a_repeated_delta_is_trimmed_to_what_the_bubble_lacks() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello")))
    assert live.delta_text(ACTIVE, 2, "text", _delta("llo wo", 2)) == " wo"
    assert live.delta_text(ACTIVE, 2, "text", _delta("Hello wo", 0)) == ""
    assert live.delta_text(ACTIVE, 2, "text", _delta("world", 6)) == "rld"


def test_a_delta_past_the_shown_text_is_a_gap() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello")))
    assert live.delta_text(ACTIVE, 2, "text", _delta("world", 6)) is None
    # Nothing was taken from the gapped frame: the bubble still ends at 5 characters.
    assert live.delta_text(ACTIVE, 2, "text", _delta(" ", 5)) == " "


def test_a_new_model_call_starts_its_bubble_at_zero() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello")))
    assert live.open_stream(ACTIVE, 3) == (2, 3)  # closes the old bubble, opens the new one
    assert live.delta_text(ACTIVE, 3, "text", _delta("x", 1, iteration=3)) is None
    assert live.delta_text(ACTIVE, 3, "text", _delta("New", 0, iteration=3)) == "New"


def test_reasoning_and_text_are_counted_apart() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello", reasoning="Hm")))
    reasoning = _delta("m.", 1) | {"kind": "reasoning"}
    assert live.delta_text(ACTIVE, 2, "reasoning", reasoning) == "."
    assert live.delta_text(ACTIVE, 2, "text", _delta("!", 5)) == "!"


def test_a_delta_without_an_offset_is_taken_as_it_comes() -> None:
    live = LiveFilter(_snapshot(partial=Partial(ACTIVE, 2, text="Hello")))
    assert live.delta_text(ACTIVE, 2, "text", _delta("anything", None)) == "anything"
