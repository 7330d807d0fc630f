"""An operator's bad day, reproduced against real Daphne processes (issue: run hosting).

Each test injects one fault (SIGKILL during a burst, a reap, a starved event loop,
terminated database connections, Redis gone and back) and asserts what the user sees and
what the database holds.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import time
from typing import Any

import pytest

from .conftest import (
    ASSISTANT,
    PASSWORD,
    REPLY,
    REPO_ROOT,
    alogin,
    chat_path,
    poll,
    process_env,
    status_of,
)

HOST_STOPPED = "Interrupted: the server process hosting this run stopped."
NOTICE = r'data-testid="run-notice" data-status="(?P<status>[^"]+)"[^>]*>(?P<text>[^<]*)<'
PARTIAL = r'data-testid="partial-mark">(?P<text>[^<]*)<'
USER = r'data-role="user" data-message-id="[^"]+">\s*<div class="bubble user">(?P<text>[^<]*)<'
APPROVAL_EXTENSIONS = (
    ("demo_tools", {"tools": ["calculator"]}),
    ("tool_approval", {"tools": ["calculator"]}),
)


def _answers(client: Any, *, after: int = 0) -> list[str]:
    return [m["body"] for m in client.search_all(ASSISTANT, after=after)]


# -- 1. SIGKILL during a burst of run starts (one Daphne, SQLite) -----------------------------


SEED = """
import json
from django.contrib.auth import get_user_model
from agents.models import AgentProfile, ChatSession
user = get_user_model().objects.create_user("burst-alice", password={password!r})
profile = AgentProfile.objects.create(
    name="burst", slug="burst", provider="demo", model_name="demo",
    provider_settings={{"delay": 0.05, "reply_words": 80}},
)
ids = [ChatSession.objects.create(owner=user, profile=profile).id for _ in range({count})]
print(json.dumps(ids))
"""


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def test_kill_during_a_burst_loses_no_message_a_tab_showed_as_sent(
    daphne_cluster, scale_database, sockets, tmp_path
):
    count = 40
    db_file = tmp_path / "burst.sqlite3"
    env = {"DATABASE_URL": f"sqlite:///{db_file}", "REDIS_URL": None}
    setup_env = process_env(scale_database, env)
    _manage(setup_env, "migrate", "--noinput", "-v0")
    seeded = _manage(setup_env, "shell", "-c", SEED.format(password=PASSWORD, count=count))
    ids = json.loads(seeded.strip().splitlines()[-1])
    [server] = daphne_cluster.start(1, env=env, names=("sqlite",))
    cookie = await alogin(server.url, "burst-alice")
    tabs = await asyncio.gather(
        *(sockets(server, chat_path(sid), cookie, label=f"tab-{i}") for i, sid in enumerate(ids))
    )
    texts = [f"burst message number {i}" for i in range(count)]
    await asyncio.gather(
        *(tab.send(type="message", text=t) for tab, t in zip(tabs, texts, strict=True))
    )

    def shown_as_sent(tab: Any, text: str) -> bool:
        replied = any(m["outcome"] == "accepted" for m in tab.search_all(REPLY))
        return replied or any(m["text"] == text for m in tab.search_all(USER))

    # Kill while the burst is being taken in: some tabs were told, others not yet.
    await poll(
        lambda: asyncio.sleep(
            0, sum(shown_as_sent(t, x) for t, x in zip(tabs, texts, strict=True)) >= 5
        ),
        timeout=20,
        interval=0.005,
        what="the first tabs are told their message is sent",
    )
    server.kill()
    shown = [
        sid for sid, tab, text in zip(ids, tabs, texts, strict=True) if shown_as_sent(tab, text)
    ]

    with sqlite3.connect(db_file) as db:
        stored = {
            (session, content)
            for session, content in db.execute(
                "SELECT session_id, content FROM agents_message WHERE role = 'user'"
            )
        }
    print(f"\n{len(shown)} of {count} tabs showed their message as sent before the kill")
    assert shown, "the kill came before any tab was told anything"
    lost = [sid for sid in shown if (sid, texts[ids.index(sid)]) not in stored]
    assert lost == [], f"{len(lost)} messages shown as sent are not in the database"


# -- 2. after a crash and the reap, the transcript shows the interrupted run -------------------


async def test_a_reconnecting_tab_shows_the_interrupted_run_its_partial_answer_and_why(
    daphne_cluster, rows, sockets
):
    a, b = daphne_cluster.start(2, names=("A", "B"))
    owner = await rows.call(rows.create_user, "reap-alice")
    profile = await rows.call(
        rows.create_profile, "reap-slow", provider_settings={"delay": 0.1, "reply_words": 300}
    )
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    cookie = await alogin(b.url, "reap-alice")
    sender = await sockets(a, chat_path(session_id), cookie, label="chat@A")
    await sender.send(type="message", text="tell me a long story")

    async def checkpointed():
        runs = await rows.call(rows.runs, session_id)
        return runs and len(runs[0].partial_text.split()) >= 5 and runs[0]

    run = await poll(checkpointed, timeout=20, what="the streaming answer is checkpointed")
    assert a.hosts(run.host)
    a.kill()

    async def interrupted():
        current = await rows.call(rows.run, run.request_id)
        return current.status == "interrupted" and current

    reaped = await poll(interrupted, timeout=15, what="B interrupts the run")
    assert reaped.error == HOST_STOPPED and reaped.partial_text == ""

    tab = await sockets(b, chat_path(session_id), cookie, label="reconnected@B")
    snapshot = tab.frames[0]
    [notice] = re.findall(NOTICE, snapshot)
    assert notice[0] == "interrupted" and HOST_STOPPED in notice[1]
    [answer] = _answers(tab)
    assert re.search(PARTIAL, answer) and "interrupted" in re.search(PARTIAL, answer)["text"]

    def assistant_rows(alias):
        from agents.models import Message

        return list(
            Message.objects.using(alias)
            .filter(session_id=session_id, role="assistant")
            .values("content", "attributes", "include_in_messages")
        )

    stored = await rows.call(rows.execute, assistant_rows)
    assert len(stored) == 1 and stored[0]["content"].startswith(run.partial_text)
    assert stored[0]["attributes"] == {"partial": True, "stopped": "interrupted"}
    assert stored[0]["include_in_messages"] is False
    # The status bar shows the last run's outcome; the session takes the next message.
    assert 'data-status="interrupted"' in snapshot

    cursor = tab.mark()
    await tab.send(type="message", text="are you there?")
    _, reply = await tab.wait_search(REPLY, after=cursor)
    assert (reply["outcome"], reply["action"]) == ("accepted", "message")
    await tab.wait_search(r'hx-swap-oob="beforeend:#answer-', after=cursor)  # a new answer


# -- 3. a starved event loop is not a dead host ------------------------------------------------


async def test_a_host_whose_event_loop_is_starved_past_a_heartbeat_is_not_reaped(
    daphne_cluster, rows, sockets
):
    starve = 5.0  # FAST_TIMINGS: heartbeat 0.5 s, stale after 3 s
    env = {"ZETT_EXTENSIONS": "tests.scale.starving.LoopStarver"}
    a, b = daphne_cluster.start(
        2, names=("A", "B"), env={**env, "ZETT_TEST_STARVE_SECONDS": str(starve)}
    )
    owner = await rows.call(rows.create_user, "starve-alice")
    profile = await rows.call(rows.create_profile, "starve", extensions=(("loop_starver", {}),))
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    cookie = await alogin(a.url, "starve-alice")
    watcher = await sockets(b, chat_path(session_id), cookie, label="chat@B")
    sender = await sockets(a, chat_path(session_id), cookie, label="chat@A")
    started = time.monotonic()
    await sender.send(type="message", text="hello")
    await watcher.wait_for(
        lambda f: (s := status_of(f)) and s["status"] in ("completed", "interrupted"),
        timeout=starve + 15,
    )
    assert time.monotonic() - started >= starve  # the loop really was blocked that long
    [run] = await rows.call(rows.runs, session_id)
    assert (run.status, run.error) == ("completed", "")
    assert a.hosts(run.host)
    for member in (a, b):
        assert "marked interrupted elsewhere" not in member.log(), member.log()
        assert "lost its host lease" not in member.log(), member.log()


# -- 4. PostgreSQL connections terminated mid-run ----------------------------------------------


def _terminate_backends(alias: str) -> int:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "two-processes"])
async def test_terminated_database_connections_end_no_run_and_no_chat(
    daphne_cluster, rows, sockets, processes
):
    members = daphne_cluster.start(processes)
    owner = await rows.call(rows.create_user, f"pgkill-alice-{processes}")
    profile = await rows.call(
        rows.create_profile,
        f"pgkill-{processes}",
        provider_settings={"delay": 0.05, "reply_words": 40},
    )
    chats = 4
    session_ids = await rows.call(rows.create_sessions, owner, profile, chats)
    cookie = await alogin(members[0].url, f"pgkill-alice-{processes}")
    tabs = [
        await sockets(members[i % processes], chat_path(sid), cookie, label=f"chat-{i}")
        for i, sid in enumerate(session_ids)
    ]
    for tab in tabs:
        await tab.send(type="message", text="count slowly")
    for tab in tabs:
        await tab.wait_search(r'hx-swap-oob="beforeend:#answer-')
    terminated = await rows.call(rows.execute, _terminate_backends)
    assert terminated >= processes  # each process held at least one connection
    for tab in tabs:
        await tab.wait_for(
            lambda f: (s := status_of(f)) and s["status"] in ("completed", "failed", "interrupted"),
            timeout=30,
        )
    for sid in session_ids:
        [run] = await rows.call(rows.runs, sid)
        assert (run.status, run.error) == ("completed", ""), (run.status, run.error)
    # The first message after the fault gets its answer in every chat.
    for tab in tabs:
        cursor = tab.mark()
        await tab.send(type="message", text="and again")
        await tab.wait_for(
            lambda f: (s := status_of(f)) and s["status"] == "completed", after=cursor, timeout=30
        )
        assert not tab.closed.is_set()
    for member in members:
        assert "Interrupted" not in member.log()


# -- 5. Redis stopped for 5 s, then back --------------------------------------------------------


REDIS_LAYERS = pytest.mark.parametrize("redis_layer", ["core", "pubsub"])


@REDIS_LAYERS
async def test_the_first_command_after_a_redis_restart_goes_through(
    private_redis, monkeypatch, redis_layer
):
    """Redis restarted: the pooled connections are dead, yet the first send must not fail."""
    from django.utils.module_loading import import_string

    from zett_site.settings import _channel_layers

    monkeypatch.setenv("REDIS_URL", private_redis.url)
    monkeypatch.setenv("ZETT_REDIS_LAYER", redis_layer)
    config = _channel_layers()["default"]
    layer = import_string(config["BACKEND"])(**config["CONFIG"])
    channel = await layer.new_channel()
    # Several connections in the pool, as on a busy process.
    await asyncio.gather(*(layer.group_send("probe", {"type": "x"}) for _ in range(5)))
    private_redis.stop()
    private_redis.start()
    if redis_layer == "pubsub":
        # It tells each receiver once that it lost Redis (the page then says reconnecting).
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(layer.receive(channel), 5)
    await layer.group_add("after", channel)
    await layer.group_send("after", {"type": "hello"})
    assert (await asyncio.wait_for(layer.receive(channel), 5))["type"] == "hello"
    await layer.flush()


@REDIS_LAYERS
async def test_after_a_redis_outage_control_and_live_updates_come_back(
    daphne_cluster, rows, sockets, private_redis, redis_layer
):
    env = {"REDIS_URL": private_redis.url, "ZETT_REDIS_LAYER": redis_layer}
    a, b = daphne_cluster.start(2, names=("A", "B"), env=env)
    owner = await rows.call(rows.create_user, f"redis-alice-{redis_layer}")
    profile = await rows.call(
        rows.create_profile, f"redis-approval-{redis_layer}", extensions=APPROVAL_EXTENSIONS
    )
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    cookie = await alogin(b.url, f"redis-alice-{redis_layer}")
    sender = await sockets(a, chat_path(session_id), cookie, label="chat@A")
    await sender.send(type="message", text="What is 6*7?")
    await sender.wait_for(lambda f: (s := status_of(f)) and s["status"] == "waiting")
    [run] = await rows.call(rows.runs, session_id)
    assert a.hosts(run.host)

    private_redis.stop()
    await asyncio.sleep(1.0)
    # A tab opened during the outage gets the stored chat and says live updates reconnect.
    during = await sockets(b, chat_path(session_id), cookie, label="during@B")
    assert 'data-live="0"' in during.frames[0]
    assert 'data-status="waiting"' in during.frames[0]
    await asyncio.sleep(4.0)
    assert not during.closed.is_set()
    private_redis.start()

    # The tab catches up by itself once the layer is back ...
    await during.wait_search(r'data-live="1"', timeout=15)
    assert not during.closed.is_set()
    # ... and a cancel sent through B reaches A, which hosted the run since before.
    cursor = during.mark()
    await during.send(type="cancel")
    _, reply = await during.wait_search(REPLY, after=cursor, timeout=15)
    assert reply["outcome"] == "accepted", reply["text"]
    await during.wait_for(
        lambda f: (s := status_of(f)) and s["status"] == "cancelled", after=cursor, timeout=15
    )
    stopped = await rows.call(rows.run, run.request_id)
    assert (stopped.status, stopped.cancel_state) == ("cancelled", "stopped")


# -- 7. a provider that sends only keep-alive comments ------------------------------------------


class KeepAliveOnly:
    """A Chat Completions endpoint that answers 200 and then sends only SSE comments."""

    def __init__(self) -> None:
        import http.server
        import threading

        stop = self.stop = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    while not stop.wait(0.2):
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                except OSError:
                    pass  # the client gave up, as it should

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


async def test_a_provider_sending_only_keep_alives_fails_the_run_with_a_timeout(
    daphne_cluster, rows, sockets
):
    provider = KeepAliveOnly()
    try:
        [server] = daphne_cluster.start(1)
        owner = await rows.call(rows.create_user, "keepalive-alice")
        profile = await rows.call(
            rows.create_profile,
            "keepalive",
            provider="openai",
            model_name="fake-model",
            provider_settings={"base_url": provider.url, "max_retries": 0, "timeout": 2},
        )
        [session_id] = await rows.call(rows.create_sessions, owner, profile)
        cookie = await alogin(server.url, "keepalive-alice")
        chat = await sockets(server, chat_path(session_id), cookie)
        started = time.monotonic()
        await chat.send(type="message", text="hello?")
        index, _ = await chat.wait_for(
            lambda f: (s := status_of(f)) and s["status"] == "failed", timeout=20
        )
        elapsed = time.monotonic() - started
        assert elapsed < 10, f"the idle timeout of 2 s took {elapsed:.1f} s"
        [run] = await rows.call(rows.runs, session_id)
        assert run.status == "failed" and "2" in run.error, run.error
        assert re.search(NOTICE, "".join(chat.frames[index - 1 : index + 1]))
    finally:
        provider.close()


# -- 6. streaming over Redis while tabs reconnect -----------------------------------------------

STREAM_TEXT = r'data-testid="streaming-text">(?P<text>[^<]*)</span>'
DELTA_TEXT = r'hx-swap-oob="beforeend:#answer-[^"]*">(?P<text>[^<]*)</span>'


def _bubble_texts(frames: list[str]) -> list[str]:
    """What the page's streaming bubble showed, per snapshot: its text plus later deltas."""
    import html

    shown: list[str] = []
    for frame in frames:
        if 'data-snapshot="1"' in frame:
            found = re.search(STREAM_TEXT, frame)
            shown.append(html.unescape(found["text"]) if found else "")
        elif shown:
            shown[-1] += "".join(html.unescape(m) for m in re.findall(DELTA_TEXT, frame))
    return shown


@REDIS_LAYERS
async def test_over_redis_with_tabs_reconnecting_every_bubble_is_a_prefix_of_the_answer(
    daphne_cluster, rows, sockets, redis_layer
):
    a, b = daphne_cluster.start(2, names=("A", "B"), env={"ZETT_REDIS_LAYER": redis_layer})
    owner = await rows.call(rows.create_user, f"prefix-alice-{redis_layer}")
    profile = await rows.call(
        rows.create_profile,
        f"prefix-{redis_layer}",
        # About 4 s of streaming: the six rounds of tabs below open while it lasts.
        provider_settings={"delay": 0.01, "reply_words": 400},
    )
    session_ids = await rows.call(rows.create_sessions, owner, profile, 4)
    cookie = await alogin(a.url, f"prefix-alice-{redis_layer}")
    senders = [await sockets(a, chat_path(sid), cookie) for sid in session_ids]
    for sender in senders:
        await sender.send(type="message", text="a long answer please")
    observed: dict[str, list[str]] = {sid: [] for sid in session_ids}
    for _ in range(6):  # tabs on B open, watch a little and close, mid-stream
        tabs = [await sockets(b, chat_path(sid), cookie) for sid in session_ids]
        await asyncio.sleep(0.3)
        for sid, tab in zip(session_ids, tabs, strict=True):
            await tab.close()
            observed[sid] += _bubble_texts(tab.frames)
    for sender in senders:
        await sender.wait_for(lambda f: (s := status_of(f)) and s["status"] == "completed")
    checked = 0
    for sid in session_ids:
        [answer] = [
            m["content"] for m in await rows.call(rows.messages, sid) if m["role"] == "assistant"
        ]
        for shown in observed[sid]:
            assert answer.startswith(shown), (shown[-80:], answer[: len(shown)][-80:])
            checked += bool(shown)
    assert checked, "no tab saw the answer streaming"
