"""manage.py agent "prompt": stream one reply from an agent profile in the terminal.

The run is hosted by this process. What it waits for (a question, a tool approval) is asked
here, on the terminal: one line of input answers it. End of input, Ctrl-C or --timeout
cancel the run and end the command with a short message, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any, TextIO

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.hosting import get_run_manager, session_group
from agents.models import AgentProfile, ChatSession
from agents.profiles.demo import DEMO_SLUG, ensure_demo_profile

YES = {"y", "yes", "approve", "ok"}


class _Lines:
    """Lines typed on a terminal, read by a daemon thread so a pending read never blocks exit."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.thread: threading.Thread | None = None

    def _read(self) -> None:
        while True:
            line = self.stream.readline()
            self.loop.call_soon_threadsafe(self.queue.put_nowait, line or None)
            if not line:
                return

    async def next(self) -> str | None:
        """The next line without its newline; None at end of input."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._read, name="agent-stdin", daemon=True)
            self.thread.start()
        line = await self.queue.get()
        if line is None:
            self.queue.put_nowait(None)  # stays at end of input
            return None
        return line.rstrip("\n")


class Command(BaseCommand):
    help = (
        "Send a prompt to an agent profile (the demo agent by default) and stream the reply: "
        "tokens as they arrive, tool calls and their results. Questions and tool approvals "
        "are asked on the terminal. The conversation is stored; pass --session to continue it."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("prompt", help="the message to send")
        parser.add_argument("--session", help="continue this session (its id is printed)")
        parser.add_argument("--profile", default=DEMO_SLUG, help="agent profile slug")
        parser.add_argument("--user", default="demo", help="username owning a new session")
        parser.add_argument(
            "--timeout", type=float, default=300.0, help="seconds to wait before cancelling"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        session = self._session(options)
        self.stderr.write(f"session {session.id}")
        try:
            outcome = asyncio.run(self._run(session.id, session.owner, options))
        except KeyboardInterrupt:
            raise CommandError("interrupted") from None
        if outcome != "completed":
            raise CommandError(f"the run did not complete: {outcome}")

    def _session(self, options: dict[str, Any]) -> ChatSession:
        if options["session"]:
            session = (
                ChatSession.objects.select_related("owner").filter(pk=options["session"]).first()
            )
            if session is None:
                raise CommandError(f"no session {options['session']!r}")
            return session
        if options["profile"] == DEMO_SLUG:
            ensure_demo_profile()
        profile = AgentProfile.objects.filter(slug=options["profile"]).first()
        if profile is None:
            raise CommandError(f"no agent profile with slug {options['profile']!r}")
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: options["user"]})
        return ChatSession.objects.create(owner=user, profile=profile)

    async def _run(self, session_id: str, owner: Any, options: dict[str, Any]) -> str:
        manager = get_run_manager()
        layer = manager.layer
        channel = await layer.new_channel("cli.")
        await layer.group_add(session_group(session_id), channel)
        lines = _Lines(options.get("stdin") or sys.stdin)
        try:
            reply = await manager.submit_message(session_id, owner, options["prompt"])
            if not reply.accepted:
                return f"refused: {reply.reason}"
            follow = asyncio.create_task(self._follow(layer, channel, session_id, owner, lines))
            try:
                return await asyncio.wait_for(asyncio.shield(follow), options["timeout"])
            except TimeoutError:
                self.stderr.write(f"no answer within {options['timeout']:g} s: cancelling")
                await manager.control(session_id, owner, "cancel", {})
                await asyncio.wait({follow}, timeout=30)
                follow.cancel()
                return f"timed out after {options['timeout']:g} s"
            except asyncio.CancelledError:  # Ctrl-C: stop the run before leaving
                await manager.control(session_id, owner, "cancel", {})
                await asyncio.wait({follow}, timeout=10)
                raise
        finally:
            await layer.group_discard(session_group(session_id), channel)
            await manager.close()
            await sync_to_async(_close_db)()

    async def _follow(
        self, layer: Any, channel: str, session_id: str, owner: Any, lines: _Lines
    ) -> str:
        """Print the run's frames and answer its waits; returns the run's final status."""
        asked: set[str] = set()
        prompts: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                frame = await layer.receive(channel)
                kind = frame["type"]
                if kind in ("run.state", "run.started"):
                    waits = (frame.get("run") or {}).get("waiting_for") or []
                    for wait in waits:
                        if wait.get("id") and wait["id"] not in asked:
                            asked.add(wait["id"])
                            prompts[wait["id"]] = asyncio.create_task(
                                self._ask(session_id, owner, wait, lines)
                            )
                    open_ids = {wait.get("id") for wait in waits}
                    for wait_id, task in list(prompts.items()):
                        if wait_id not in open_ids:  # answered elsewhere (the monitor)
                            del prompts[wait_id]
                            if not task.done():
                                task.cancel()
                                self._out("\n[answered elsewhere]\n")
                elif kind == "run.finished":
                    run = frame["run"]
                    if run["status"] != "completed":
                        self._out(f"\n[run {run['status']}: {run['error'] or 'stopped'}]\n")
                    return str(run["status"])
                else:
                    self._print(frame)
        finally:
            for task in prompts.values():
                task.cancel()
            await asyncio.gather(*prompts.values(), return_exceptions=True)

    async def _ask(self, session_id: str, owner: Any, wait: dict[str, Any], lines: _Lines) -> None:
        """Ask one wait on the terminal and send the typed line as its answer."""
        manager = get_run_manager()
        if wait.get("kind") == "approval":
            arguments = json.dumps(wait.get("arguments", {}))
            self._out(f"\n? approve {wait.get('tool')}({arguments})? [y/N, or a reason] ")
        else:
            choices = wait.get("choices") or []
            hint = f" ({' / '.join(map(str, choices))})" if choices else ""
            self._out(f"\n? {wait.get('question', 'The agent asks')}{hint} ")
        line = await lines.next()
        if line is None:
            self._out("\n[end of input: cancelling the run]\n")
            await manager.control(session_id, owner, "cancel", {})
            return
        if wait.get("kind") == "approval":
            approved = line.strip().lower() in YES
            payload: dict[str, Any] = {"id": wait["id"]}
            if not approved and line.strip().lower() not in {"", "n", "no"}:
                payload["reason"] = line.strip()
            reply = await manager.control(
                session_id, owner, "approve" if approved else "deny", payload
            )
        else:
            reply = await manager.control(
                session_id, owner, "answer", {"id": wait["id"], "answer": line.strip()}
            )
        if not reply.accepted:
            self._out(f"  [not taken: {reply.reason}]\n")

    def _print(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "run.delta" and frame["kind"] == "text":
            self._out(frame["text"])
        elif kind == "run.message" and frame["message"]["role"] == "assistant":
            self._out("\n")
        elif kind == "run.tool":
            call = frame["call"] or {}
            if frame["status"] == "started":
                self._out(f"  [tool {call.get('name')}({json.dumps(call.get('arguments'))})]\n")
            else:
                result = frame.get("result") or {}
                self._out(f"  [{frame['status']}: {result.get('content', '')}]\n")

    def _out(self, text: str) -> None:
        self.stdout.write(text, ending="")
        self.stdout.flush()


def _close_db() -> None:
    from django.db import connections

    connections.close_all()
