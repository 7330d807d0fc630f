"""Hostile WebSocket input against a live Daphne: every frame answered, the log clean.

Each hostile frame must get an error fragment (or, for control frames that parse, an explicit
reply), or the socket must be closed with a documented code: 1009 for a message above
Daphne's 1 MiB limit. Afterwards the server log holds no traceback and the chat still works.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
from websockets.exceptions import InvalidStatus

from .conftest import MONITOR_PATH, alogin, chat_path, status_of

ERROR = r'data-testid="frame-error" data-error="(?P<code>[^"]+)"'
REPLY = r'data-testid="control-reply" data-reply="(?P<outcome>[^"]+)"'
ANSWERED = re.compile(f"{ERROR}|{REPLY}")
# Lines that mean something escaped the consumers' checks.
LOG_ALARMS = (
    "Traceback",
    "Exception inside application",
    "Task exception was never retrieved",
    "closed protocol",
    " ERROR ",
    "CRITICAL",
)

FIELDS = {
    "message": ("text",),
    "steer": ("text",),
    "approve": ("id", "reason"),
    "deny": ("id", "reason"),
    "answer": ("id", "answer"),
    "cancel": (),
}
WRONG_VALUES: tuple[object, ...] = (None, 0, -1, 1.5, True, False, [], {}, ["x"], {"a": "b"})
VALID = {"text": "hi", "id": "call-1", "reason": "why", "answer": "yes"}


def _deep(depth: int) -> Iterator[str]:
    yield "[" * depth + "]" * depth
    yield '{"a":' * depth + "1" + "}" * depth
    yield '{"type":"message","text":' + "[" * depth + "]" * depth + "}"
    yield '{"type":' + '{"a":' * depth + "1" + "}" * depth + "}"


def hostile_frames(*, monitor: bool) -> Iterator[str | bytes]:
    """Frames a browser of ours never sends, each needing an answer."""
    session = {"session": "00000000-0000-0000-0000-000000000000"} if monitor else {}
    for depth in (1_000, 5_000, 20_000):
        yield from _deep(depth)
    for kind, fields in FIELDS.items():
        if monitor and kind == "message":
            continue
        for field in (*fields, "type", *(("session",) if monitor else ())):
            for wrong in WRONG_VALUES:
                frame = {"type": kind, **{f: VALID[f] for f in fields}, **session}
                frame[field] = wrong
                if field == "reason" and wrong is None:
                    continue  # an absent reason is fine; the frame then parses
                yield json.dumps(frame)
            # A lone surrogate is valid JSON and not valid UTF-8.
            frame = {"type": kind, **{f: VALID[f] for f in fields}, **session}
            frame[field] = "a\ud800b"
            yield json.dumps(frame)
    for number in ("1e999999", "-1e400", "9" * 5_000, "1" + "0" * 400, "NaN", "Infinity"):
        yield '{"type":"message","text":' + number + "}"
        yield '{"type":' + number + "}"
        yield number
    yield from ("", " ", "null", "true", "1", '"message"', "[]", "[{}]", "{", '{"type"', "\x00")
    yield '{"type":"message","text":"x","type":"cancel"}'.replace("cancel", "nope")
    yield b"\x00\xff\xfe"
    yield json.dumps({"type": "message", "text": "as bytes"}).encode()
    yield json.dumps({"type": "message", "text": "x" * 70_000})  # above our 64 KiB
    yield json.dumps({"type": "steer", "text": "y" * 10_001})  # above the text limit


async def _answer(client, cursor: int) -> str:
    _, match = await client.wait_for(ANSWERED.search, after=cursor, what="an answer")
    return match.group("code") or match.group("outcome")


@pytest.mark.parametrize("path_kind", ["chat", "monitor"])
async def test_every_hostile_frame_is_answered_and_the_log_stays_clean(
    daphne_cluster, rows, sockets, path_kind
):
    [server] = daphne_cluster.start(1)
    owner = await rows.call(rows.create_user, f"fuzz-{path_kind}", staff=True)
    profile = await rows.call(rows.create_profile, f"fuzz-{path_kind}")
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    cookie = await alogin(server.url, f"fuzz-{path_kind}")
    monitor = path_kind == "monitor"
    path = MONITOR_PATH if monitor else chat_path(session_id)
    client = await sockets(server, path, cookie, label=path_kind)

    answers: dict[str, int] = {}
    frames = list(hostile_frames(monitor=monitor))
    for frame in frames:
        cursor = client.mark()
        await client.connection.send(frame)
        code = await _answer(client, cursor)
        answers[code] = answers.get(code, 0) + 1
    assert sum(answers.values()) == len(frames)
    assert {"bad_json", "too_deep", "too_large", "not_object", "unknown_type", "invalid"} <= set(
        answers
    )

    # A flood: many frames without waiting, each still answered, in order.
    cursor = client.mark()
    flood = 300
    for index in range(flood):
        await client.connection.send(json.dumps({"type": "approve", "id": index}))
    await client.wait_for(
        lambda _: len(client.search_all(ERROR, after=cursor)) >= flood, what="every flood answer"
    )

    # Above Daphne's 1 MiB message limit the server fails the connection with 1009 (message
    # too big); it drops TCP while the client still sends, so the client may see only 1006.
    await client.connection.send(json.dumps({"type": "message", "text": "z" * 2**21}))
    await asyncio.wait_for(client.closed.wait(), 15)
    assert client.connection.close_code in (1009, 1006)

    await _chat_still_works(server, sockets, cookie, session_id)
    log = server.log()
    for alarm in LOG_ALARMS:
        assert alarm not in log, f"{alarm!r} in the server log:\n{log[-5000:]}"


async def _chat_still_works(server, sockets, cookie: str, session_id: str) -> None:
    chat = await sockets(server, chat_path(session_id), cookie, label="after")
    cursor = chat.mark()
    await chat.send(type="message", text="still here after all that")
    index, _ = await chat.wait_search(
        r'data-role="assistant"[^>]*>(?:(?!</article>).)*still here after all that', after=cursor
    )
    await chat.wait_for(lambda f: (s := status_of(f)) and s["status"] == "completed", after=index)


async def test_clients_that_vanish_mid_exchange_leave_no_traceback(daphne_cluster, rows, sockets):
    from websockets.asyncio.client import connect

    [server] = daphne_cluster.start(1)
    owner = await rows.call(rows.create_user, "fuzz-vanish", staff=True)
    profile = await rows.call(
        rows.create_profile, "fuzz-vanish", provider_settings={"delay": 0.001}
    )
    session_ids = await rows.call(rows.create_sessions, owner, profile, 10)
    cookie = await alogin(server.url, "fuzz-vanish")

    async def vanish(path: str, frame: str | None, *, abort: bool) -> None:
        connection = await connect(
            f"{server.ws_url}{path}", origin=server.url, additional_headers={"Cookie": cookie}
        )
        await connection.recv()  # the snapshot
        if frame is not None:
            await connection.send(frame)
            await connection.recv()  # the reply: the server is busy streaming now
        if abort:  # the TCP connection drops without a closing handshake
            connection.transport.abort()
        else:  # a closing handshake while the server is still sending
            await connection.close()

    text = json.dumps({"type": "message", "text": "go " * 300})
    for abort in (False, True, False, True):
        await asyncio.gather(
            *(vanish(chat_path(sid), text, abort=abort) for sid in session_ids),
            *(vanish(MONITOR_PATH, '{"type":"cancel"}', abort=abort) for _ in range(10)),
            *(vanish(chat_path(session_ids[0]), None, abort=abort) for _ in range(10)),
        )
        for session_id in session_ids:
            await _wait_settled(rows, session_id)
    await _chat_still_works(server, sockets, cookie, session_ids[0])
    log = server.log()
    for alarm in LOG_ALARMS:
        assert alarm not in log, f"{alarm!r} in the server log:\n{log[-5000:]}"


async def _wait_settled(rows, session_id: str) -> None:
    from .conftest import poll

    async def settled() -> bool:
        runs = await rows.call(rows.runs, session_id)
        return bool(runs) and all(
            run.status not in ("queued", "running", "waiting") for run in runs
        )

    await poll(settled, timeout=60, what=f"runs of {session_id} settled")


async def test_an_upgrade_to_an_unknown_path_is_refused_without_an_error(
    daphne_cluster, rows, sockets
):
    from websockets.asyncio.client import connect

    [server] = daphne_cluster.start(1)
    await rows.call(rows.create_user, "fuzz-path")
    cookie = await alogin(server.url, "fuzz-path")
    for path in ("/ws/nope/", "/", "/ws/sessions/", "/ws/monitor/extra/", "/static/zett.css"):
        with pytest.raises(InvalidStatus) as refused:
            await connect(
                f"{server.ws_url}{path}", origin=server.url, additional_headers={"Cookie": cookie}
            )
        assert refused.value.response.status_code in (403, 404), path
    log = server.log()
    for alarm in LOG_ALARMS:
        assert alarm not in log, f"{alarm!r} in the server log:\n{log[-5000:]}"
