"""What a browser may send on the two sockets: JSON frames, validated before anything acts.

A bad frame raises FrameError, whose code and detail the consumer sends back as an error
fragment, and nothing else happens. parse_frame raises nothing else, whatever the bytes: JSON
nested too deep for the decoder, lone surrogates (valid JSON, not valid UTF-8, so they would
fail later when echoed back), huge numbers and wrong types all end here as FrameError.

Error codes: bad_json, too_deep, too_large, not_object, unknown_type, invalid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MAX_FRAME_BYTES = 64 * 1024
MAX_TEXT = 10_000
MAX_REASON = 2_000
MAX_ID = 200

#: Frame types a chat socket accepts; the monitor accepts the same except "message" and
#: "compact" (starting runs is the chat's).
CHAT_FRAME_TYPES = frozenset({"message", "approve", "deny", "answer", "steer", "cancel", "compact"})
MONITOR_FRAME_TYPES = CHAT_FRAME_TYPES - {"message", "compact"}


class FrameError(ValueError):
    """A frame that is refused: `code` is a stable token, `detail` a sentence for people."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Frame:
    """One valid browser frame: what to do, its payload, and (monitor) which session."""

    type: str  # one of CHAT_FRAME_TYPES
    payload: dict[str, Any] = field(default_factory=dict)  # the checked fields only
    session_id: str = ""  # monitor frames name the session they act on


def _text(data: dict[str, Any], name: str, *, limit: int, required: bool = True) -> str:
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise FrameError("invalid", f"'{name}' must be a string.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FrameError("invalid", f"'{name}' is not valid Unicode.") from None
    value = value.strip()
    if required and not value:
        raise FrameError("invalid", f"'{name}' must not be empty.")
    if len(value) > limit:
        raise FrameError("invalid", f"'{name}' is longer than {limit} characters.")
    return value


def _payload(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    if kind in ("message", "steer"):
        return {"text": _text(data, "text", limit=MAX_TEXT)}
    if kind in ("approve", "deny"):
        payload = {"id": _text(data, "id", limit=MAX_ID)}
        reason = _text(data, "reason", limit=MAX_REASON, required=False)
        if reason:
            payload["reason"] = reason
        return payload
    if kind == "answer":
        return {
            "id": _text(data, "id", limit=MAX_ID),
            "answer": _text(data, "answer", limit=MAX_TEXT),
        }
    return {}  # cancel and compact carry nothing


def parse_frame(
    raw: str | bytes | None,
    *,
    allowed: frozenset[str] = CHAT_FRAME_TYPES,
    needs_session: bool = False,
) -> Frame:
    """Decode and check one frame; raise FrameError for anything not exactly as expected."""
    if raw is None:
        raise FrameError("invalid", "Empty frame.")
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_FRAME_BYTES:
        raise FrameError("too_large", f"Frame larger than {MAX_FRAME_BYTES // 1024} KiB.")
    if isinstance(raw, bytes):
        raise FrameError("invalid", "Binary frames are not accepted.")
    try:
        data = json.loads(raw)
    except RecursionError:
        # The C decoder recurses once per level; no frame of ours nests at all.
        raise FrameError("too_deep", "Frame is nested too deeply.") from None
    except ValueError:  # also: integers beyond Python's digit limit
        raise FrameError("bad_json", "Frame is not valid JSON.") from None
    if not isinstance(data, dict):
        raise FrameError("not_object", "Frame must be a JSON object.")
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in allowed:
        raise FrameError("unknown_type", "Unknown frame type.")
    session_id = ""
    if needs_session:
        session_id = _text(data, "session", limit=MAX_ID)
    return Frame(kind, _payload(kind, data), session_id)
