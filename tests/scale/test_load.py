"""Load: 200 chat sockets on two processes, ten messages each, every count exact."""

from __future__ import annotations

import asyncio
import re
import time

from .conftest import (
    ASSISTANT,
    alogin,
    chat_path,
    status_of,
)

CLIENTS = 200
MESSAGES = 10
USERS = 10  # logging in hashes a password on purpose slowly: sessions share users
DEADLINE = 240.0  # seconds for all 2000 runs
RUN_TIMEOUT = 30.0  # for one run's end to reach its page (a run takes milliseconds)


def token(client: int, message: int) -> str:
    return f"load c{client} m{message} end"


async def test_two_hundred_clients_times_ten_messages_all_complete_with_exact_counts(
    daphne_cluster, rows, sockets
):
    servers = daphne_cluster.start(2, names=("A", "B"))
    profile = await rows.call(rows.create_profile, "load-echo", provider_settings={"delay": 0})
    owners = [await rows.call(rows.create_user, f"load-user-{n}") for n in range(USERS)]
    sessions: list[str] = []
    for owner in owners:
        sessions += await rows.call(rows.create_sessions, owner, profile, CLIENTS // USERS)
    cookies = await asyncio.gather(
        *(alogin(servers[n % 2].url, f"load-user-{n}") for n in range(USERS))
    )
    clients = []
    for start in range(0, CLIENTS, 50):  # connect in waves rather than 200 handshakes at once
        clients += await asyncio.gather(
            *(
                sockets(servers[i % 2], chat_path(sessions[i]), cookies[i // (CLIENTS // USERS)])
                for i in range(start, min(start + 50, CLIENTS))
            )
        )

    async def converse(i: int) -> None:
        client = clients[i]
        for k in range(MESSAGES):
            cursor = client.mark()
            await client.send(type="message", text=token(i, k))
            # The next message goes only after this run's end reached the page.
            await client.wait_for(
                lambda f: (s := status_of(f)) and s["status"] == "completed",
                after=cursor,
                timeout=RUN_TIMEOUT,
                what=f"the end of run {k}",
            )

    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(converse(i) for i in range(CLIENTS))), DEADLINE)
    elapsed = time.monotonic() - started
    print(
        f"\n{CLIENTS * MESSAGES} runs by {CLIENTS} clients on 2 processes in {elapsed:.1f} s "
        f"({CLIENTS * MESSAGES / elapsed:.0f} runs/s)"
    )

    for i, client in enumerate(clients):
        replies = client.search_all(r'data-reply="(\w+)" data-action="(\w+)"')
        assert [m.groups() for m in replies] == [("accepted", "message")] * MESSAGES
        finished = [s for f in client.frames if (s := status_of(f)) and s["status"] == "completed"]
        assert len(finished) == MESSAGES, f"client {i}: {len(finished)} runs finished"
        answers = {m["id"]: m["body"] for m in client.search_all(ASSISTANT)}
        assert len(answers) == MESSAGES, f"client {i}: {len(answers)} final answers"
        for k, body in enumerate(answers.values()):
            assert re.search(re.escape(token(i, k)), body), f"client {i} answer {k}: {body!r}"

    def tally(alias: str) -> tuple[dict[str, int], dict[str, list[tuple[str, str]]]]:
        from django.db.models import Count

        from agents.models import Message, Run

        statuses = dict(
            Run.objects.using(alias)
            .filter(session_id__in=sessions)
            .values_list("status")
            .annotate(n=Count("id"))
        )
        transcripts: dict[str, list[tuple[str, str]]] = {s: [] for s in sessions}
        for session_id, role, content in (
            Message.objects.using(alias)
            .filter(session_id__in=sessions)
            .order_by("session_id", "seq")
            .values_list("session_id", "role", "content")
        ):
            transcripts[session_id].append((role, content))
        return statuses, transcripts

    statuses, transcripts = await rows.call(rows.execute, tally)
    assert statuses == {"completed": CLIENTS * MESSAGES}
    for i, session_id in enumerate(sessions):
        transcript = transcripts[session_id]
        assert [role for role, _ in transcript] == ["user", "assistant"] * MESSAGES
        assert [content for role, content in transcript if role == "user"] == [
            token(i, k) for k in range(MESSAGES)
        ]
        for k in range(MESSAGES):
            assert token(i, k) in transcript[2 * k + 1][1]
