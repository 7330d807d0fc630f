"""manage.py agent "prompt": stream one reply from an agent profile in the terminal."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.hosting import get_run_manager, session_group
from agents.models import AgentProfile, ChatSession
from agents.profiles.demo import DEMO_SLUG, ensure_demo_profile


class Command(BaseCommand):
    help = (
        "Send a prompt to an agent profile (the demo agent by default) and stream the reply: "
        "tokens as they arrive, tool calls and their results. The conversation is stored; "
        "pass --session to continue it."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("prompt", help="the message to send")
        parser.add_argument("--session", help="continue this session (its id is printed)")
        parser.add_argument("--profile", default=DEMO_SLUG, help="agent profile slug")
        parser.add_argument("--user", default="demo", help="username owning a new session")
        parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait")

    def handle(self, *args: Any, **options: Any) -> None:
        session = self._session(options)
        self.stderr.write(f"session {session.id}\n")
        code = asyncio.run(self._run(session.id, session.owner, options))
        if code:
            raise CommandError("the run did not complete")

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

    async def _run(self, session_id: str, owner: Any, options: dict[str, Any]) -> int:
        manager = get_run_manager()
        layer = manager.layer
        channel = await layer.new_channel("cli.")
        await layer.group_add(session_group(session_id), channel)
        try:
            reply = await manager.submit_message(session_id, owner, options["prompt"])
            if not reply.accepted:
                self.stderr.write(f"refused: {reply.reason}\n")
                return 1
            return await asyncio.wait_for(self._print(layer, channel), options["timeout"])
        finally:
            await layer.group_discard(session_group(session_id), channel)
            await manager.close()
            await sync_to_async(_close_db)()

    async def _print(self, layer: Any, channel: str) -> int:
        out = sys.stdout
        while True:
            frame = await layer.receive(channel)
            kind = frame["type"]
            if kind == "run.delta" and frame["kind"] == "text":
                out.write(frame["text"])
            elif kind == "run.message" and frame["message"]["role"] == "assistant":
                out.write("\n")
            elif kind == "run.tool":
                call = frame["call"] or {}
                if frame["status"] == "started":
                    out.write(f"  [tool {call.get('name')}({json.dumps(call.get('arguments'))})]\n")
                else:
                    result = frame.get("result") or {}
                    out.write(f"  [{frame['status']}: {result.get('content', '')}]\n")
            elif kind == "run.custom":
                out.write(f"  [{frame['name']}: {json.dumps(frame['data'])}]\n")
            elif kind == "run.finished":
                run = frame["run"]
                if run["status"] != "completed":
                    out.write(f"\n[run {run['status']}: {run['error']}]\n")
                out.flush()
                return 0 if run["status"] == "completed" else 1
            out.flush()


def _close_db() -> None:
    from django.db import connections

    connections.close_all()
