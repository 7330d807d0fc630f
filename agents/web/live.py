"""LiveFilter: what one chat socket has already shown, and so which live frames are news.

Built from a Snapshot, it answers for each frame from the session group: is it fresh (not
covered by the snapshot, not of a run already settled), is this message new to the page,
which streaming bubble is open, and does a text delta continue the bubble exactly. A delta
that starts past the text shown means a frame was lost (the channel layer is at-most-once):
the socket then takes a fresh snapshot instead of showing a bubble with a hole.
"""

from __future__ import annotations

from typing import Any

from ..hosting import Snapshot


class LiveFilter:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.covered: dict[str, int] = {}  # request id -> last seq the snapshot contains
        self.seen_ids: set[str] = set(snap.message_ids)
        self.streaming: dict[str, int] = {}  # request id -> iteration of its open bubble
        # characters shown per (request id, iteration, kind) of open bubbles
        self.shown: dict[tuple[str, int, str], int] = {}
        run = snap.run
        active_id = run["request_id"] if run else None
        # Model calls of the active run whose answers the transcript already shows.
        self.persisted_iterations: dict[str, int] = {}
        if active_id:
            self.covered[active_id] = snap.seq
            self.persisted_iterations[active_id] = snap.persisted_iterations
        # Runs whose messages are already persisted and that are not active are over: any of
        # their frames still queued for us would only repeat what the snapshot shows.
        self.settled = {m["request_id"] for m in snap.messages if m.get("request_id")} - {active_id}
        partial = snap.partial
        if partial is not None:
            self.streaming[partial.request_id] = partial.iteration
            self.shown[(partial.request_id, partial.iteration, "text")] = len(partial.text)
            self.shown[(partial.request_id, partial.iteration, "reasoning")] = len(
                partial.reasoning
            )

    def fresh(self, event: dict[str, Any]) -> bool:
        request_id = event.get("request_id")
        if request_id in self.settled:
            return False
        covered = self.covered.get(request_id)  # type: ignore[arg-type]
        return covered is None or int(event.get("seq") or 0) > covered

    def persisted(self, event: dict[str, Any]) -> bool:
        done = self.persisted_iterations.get(event.get("request_id", ""), 0)
        return int(event.get("iteration") or 0) <= done

    def first_sight(self, message: dict[str, Any]) -> bool:
        """True once per message id: the page has not shown this message yet."""
        message_id = message.get("id")
        if not message_id or message_id in self.seen_ids:
            return False
        self.seen_ids.add(message_id)
        return True

    def open_stream(self, request_id: str, iteration: int) -> tuple[int | None, int] | None:
        """Open the bubble of a model call; (iteration closed first or None, opened) or None."""
        if self.streaming.get(request_id) == iteration:
            return None
        closed = self.streaming.get(request_id)
        if closed is not None:
            self._forget(request_id, closed)
        self.streaming[request_id] = iteration
        return closed, iteration

    def close_stream(self, request_id: str) -> int | None:
        iteration = self.streaming.pop(request_id, None)
        if iteration is not None:
            self._forget(request_id, iteration)
        return iteration

    def finish(self, request_id: str) -> int | None:
        self.settled.add(request_id)
        return self.close_stream(request_id)

    def delta_text(
        self, request_id: str, iteration: int, kind: str, event: dict[str, Any]
    ) -> str | None:
        """The part of a delta the bubble does not show yet; None when text was lost before it.

        Frames without an offset (older hosts) are taken as they come.
        """
        text = str(event.get("text", ""))
        offset = event.get("offset")
        if not isinstance(offset, int):
            return text
        key = (request_id, iteration, kind)
        open_here = self.streaming.get(request_id) == iteration
        shown = self.shown.get(key, 0) if open_here else 0
        if offset > shown:
            return None
        fresh = text[shown - offset :]
        self.shown[key] = max(shown, offset + len(text))
        return fresh

    def _forget(self, request_id: str, iteration: int) -> None:
        for kind in ("text", "reasoning"):
            self.shown.pop((request_id, iteration, kind), None)
