"""ZETT_RUN_WORKERS=1: web processes hand runs to `manage.py runworker zett-runs` processes."""

from __future__ import annotations

import html
import re

from .conftest import DELTA, alogin, chat_path, status_of

WORKERS = {"ZETT_RUN_WORKERS": "1"}
NO_WORKER = (
    "Interrupted: no worker picked this run up (is `manage.py runworker zett-runs` running?)."
)


async def test_a_worker_hosts_the_run_and_its_tokens_reach_the_chat(daphne_cluster, rows, sockets):
    web1, web2 = daphne_cluster.start(2, env=WORKERS, names=("web1", "web2"))
    worker = daphne_cluster.start_worker(env=WORKERS)
    owner = await rows.call(rows.create_user, "worker-alice")
    profile = await rows.call(rows.create_profile, "worker-echo", provider_settings={"delay": 0.01})
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(web1.url, "worker-alice")
    sender = await sockets(web1, chat_path(session_id), alice, label="chat@web1")
    chat = await sockets(web2, chat_path(session_id), alice, label="chat@web2")

    await sender.send(type="message", text="hello worker")
    await sender.wait_search(r'data-reply="accepted" data-action="message"')
    index, _ = await chat.wait_for(
        lambda f: (s := status_of(f)) and s["status"] == "completed", timeout=30
    )

    streamed = "".join(m["text"] for f in chat.frames[: index + 1] for m in re.finditer(DELTA, f))
    expected = 'You said: "hello worker". I am the offline demo model'
    assert html.unescape(streamed).startswith(expected)
    [run] = await rows.call(rows.runs, session_id)
    assert run.status == "completed"
    assert worker.hosts(run.host), f"hosted by {run.host!r}, not the worker (pid {worker.pid})"
    assert worker.process.poll() is None
    [_, answer] = await rows.call(rows.messages, session_id)
    assert answer["content"].startswith(expected)


async def test_without_a_worker_the_reaper_interrupts_the_run_naming_the_missing_worker(
    daphne_cluster, rows, sockets
):
    [web] = daphne_cluster.start(1, env=WORKERS, names=("web",))
    owner = await rows.call(rows.create_user, "noworker-alice")
    profile = await rows.call(rows.create_profile, "noworker-echo")
    [session_id] = await rows.call(rows.create_sessions, owner, profile)
    alice = await alogin(web.url, "noworker-alice")
    chat = await sockets(web, chat_path(session_id), alice, label="chat@web")

    await chat.send(type="message", text="is anybody there?")
    await chat.wait_search(r'data-reply="accepted" data-action="message"')
    [queued] = await rows.call(rows.runs, session_id)
    assert (queued.status, queued.host) == ("queued", "")

    # ZETT_STALE_RUN_SECONDS=3 here: the reaper gives up on the unclaimed run after that.
    index, _ = await chat.wait_for(
        lambda f: (s := status_of(f)) and s["status"] == "interrupted", timeout=10
    )
    assert html.escape(NO_WORKER) in chat.frames[index]
    interrupted = await rows.call(rows.run, queued.request_id)
    assert (interrupted.status, interrupted.error, interrupted.host) == (
        "interrupted",
        NO_WORKER,
        "",
    )
    # The message was stored with the run: nothing the page showed as sent is lost.
    assert [m["content"] for m in await rows.call(rows.messages, session_id)] == [
        "is anybody there?"
    ]
