"""parse_frame refuses hostile input with a FrameError, and nothing else escapes it."""

from __future__ import annotations

import json

import pytest

from agents.web.frames import MONITOR_FRAME_TYPES, FrameError, parse_frame


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("[" * 20_000 + "]" * 20_000, "too_deep"),
        ('{"type":"message","text":' + '{"a":' * 8_000 + "1" + "}" * 8_000 + "}", "too_deep"),
        ('{"type":"message","text":' + "9" * 5_000 + "}", "bad_json"),  # beyond int digits
        ('{"type":"message","text":1e999999}', "invalid"),  # inf is still not a string
        ('{"type":"message","text":"a\\ud800b"}', "invalid"),
        ('{"type":"answer","id":"\\udfff","answer":"x"}', "invalid"),
        ('{"type":"approve","id":"c1","reason":"\\ud83d"}', "invalid"),
        ('{"type":["message"],"text":"x"}', "unknown_type"),
        ('{"type":"message","text":["x"]}', "invalid"),
        ("[]", "not_object"),
        ("", "bad_json"),
        (b'{"type":"message","text":"x"}', "invalid"),
        (json.dumps({"type": "message", "text": "x" * 70_000}), "too_large"),
    ],
)
def test_hostile_frames_get_a_stable_error_code(raw: str | bytes, code: str) -> None:
    with pytest.raises(FrameError) as refused:
        parse_frame(raw)
    assert refused.value.code == code


def test_a_surrogate_in_the_monitors_session_field_is_refused() -> None:
    raw = '{"type":"cancel","session":"\\ud800"}'
    with pytest.raises(FrameError) as refused:
        parse_frame(raw, allowed=MONITOR_FRAME_TYPES, needs_session=True)
    assert refused.value.code == "invalid"


def test_a_proper_astral_character_still_passes() -> None:
    frame = parse_frame('{"type":"message","text":"\\ud83d\\ude00 hi"}')
    assert frame.payload == {"text": "\U0001f600 hi"}
