"""Benchmark harness: Daphne processes on fresh databases, bench users and sessions, WS clients.

Shared by bench/streaming.py. Everything started here is owned by a ``Processes`` stack and
stopped by its ``close`` (the caller keeps it in a try/finally), so Ctrl-C or an error never
leaves a server, a load worker or a PostgreSQL database behind.

Database setup runs in a child interpreter (``python bench/_harness.py setup``) with the
server's environment, so one bench invocation can prepare a SQLite file and a PostgreSQL
database without configuring Django twice in its own process.

Profiling hook: with ``ZETT_BENCH_PROFILE_DIR`` set, every Daphne runs under cProfile and
writes ``<dir>/<name>.prof`` when it stops (main thread only: the event loop).

What-if hook (never the product's figures): a dashboard served as
``bench._harness:whatif_application`` with ``ZETT_BENCH_WHATIF=dispatch,layer`` gets the
fixes proposed for the bottlenecks this benchmark found, patched in at start-up, so their
effect can be measured before anyone changes agents/ or zett_site/:
``dispatch`` - group messages (``run.*``, ``monitor.*``) skip Channels' per-message
``aclose_old_connections`` thread hop; ``layer`` - the in-memory layer scans for expired
messages at most once a second instead of on every send and receive; ``switch`` - the GIL
switch interval drops from 5 ms to 0.5 ms, so the ORM thread is not starved by a busy loop.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
START_TIMEOUT = 40.0
STOP_TIMEOUT = 10.0
PASSWORD = "bench-password-8c1f"
USER, STAFF = "bench", "bench-staff"
PROBE_PATH = "bench.latency_probe.LatencyProbeExtension"
PROBE_KEY = "latency_probe"
PROFILE_SLUG = "bench"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Server:
    """One running Daphne process."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.url

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_process(process: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM (Daphne stops its reactor and cProfile can write), then SIGKILL if needed."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Processes:
    """Owns every process and temporary resource a bench invocation starts."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zett-bench-")))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(50))
    servers: list[Server] = field(default_factory=list)
    children: list[subprocess.Popen[Any]] = field(default_factory=list)
    cleanups: list[Any] = field(default_factory=list)  # callables, run last-in first-out
    logs: dict[str, dict[str, Any]] = field(default_factory=dict)  # server name -> error summary

    def base_env(self, **extra: str) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("ZETT_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
        }
        # Tuning knobs a benchmark run may vary on purpose (e.g. the delta batch window).
        for key in (
            "ZETT_DELTA_BATCH_SECONDS",
            "ZETT_THREAD_SWITCH_SECONDS",
            "ZETT_REDIS_LAYER",
            "ZETT_MONITOR_INTERVAL_SECONDS",
            "ZETT_DB_HOP_PROFILE",
        ):
            if key in os.environ:
                env[key] = os.environ[key]
        path = os.environ.get("PYTHONPATH", "")
        env.update(
            PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""),
            DJANGO_SETTINGS_MODULE="zett_site.settings",
            DJANGO_SECRET_KEY=self.secret_key,
            DJANGO_DEBUG="0",
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            ZETT_SERVE_STATIC="0",
            ZETT_LOG_LEVEL="WARNING",
            ZETT_EXTENSIONS=PROBE_PATH,
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def start_server(self, name: str, app: str, env: dict[str, str]) -> Server:
        port = free_port()
        log_path = self.workdir / f"{name}.log"
        command = [PYTHON]
        profile_dir = os.environ.get("ZETT_BENCH_PROFILE_DIR", "").strip()
        if profile_dir:
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            command += ["-m", "cProfile", "-o", str(Path(profile_dir) / f"{name}.prof")]
        command += ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        server = Server(name, process, port, log_path)
        self.servers.append(server)
        deadline = time.monotonic() + START_TIMEOUT
        while not port_open("127.0.0.1", port, 0.2):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not listen within {START_TIMEOUT}s")
            time.sleep(0.05)
        return server

    def stop_server(self, server: Server, timeout: float = STOP_TIMEOUT) -> None:
        stop_process(server.process, timeout=timeout)
        if server in self.servers:
            self.servers.remove(server)
        text = server.log_tail(2_000_000)
        last = text.rfind("Traceback (most recent call last)")
        self.logs[server.name] = {
            "log": str(server.log_path),
            "tracebacks": text.count("Traceback (most recent call last)"),
            "last_traceback": text[last : last + 3000] if last >= 0 else "",
        }

    def spawn(self, command: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen:
        process = subprocess.Popen(command, cwd=ROOT, env=env, **kwargs)
        self.children.append(process)
        return process

    def close(self) -> None:
        for process in self.children:
            stop_process(process, timeout=5)
        for server in list(self.servers):
            self.stop_server(server)
        while self.cleanups:
            cleanup = self.cleanups.pop()
            try:
                cleanup()
            except Exception as exc:  # cleanup must go on: report and continue
                print(f"bench: cleanup failed: {exc}", file=sys.stderr)
        # The databases go; the server logs stay for a look at what went wrong.
        for pattern in ("*.sqlite3", "*.sqlite3-wal", "*.sqlite3-shm"):
            for path in self.workdir.glob(pattern):
                path.unlink(missing_ok=True)


# -- databases ---------------------------------------------------------------------------


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def create_postgres_database(admin_url: str, name: str) -> str:
    """CREATE DATABASE name on the server of admin_url; the URL of the new database."""
    import psycopg

    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"unsafe database name {name!r}")
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(admin_url)
    return parts._replace(path=f"/{name}").geturl()


def drop_postgres_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def migrate(env: dict[str, str]) -> None:
    result = subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"migrate failed:\n{result.stdout}\n{result.stderr}")


def setup_data(
    env: dict[str, str],
    sessions: int,
    delay: float,
    reply_words: int,
    *,
    first_token_delay: float = 0.0,
    tools: tuple[str, ...] = (),
) -> dict:
    """Users, the bench profile and `sessions` fresh sessions; see _setup_main for the JSON.

    ``first_token_delay`` goes to the demo model's settings when set; ``tools`` replaces the
    demo tools the profile offers (e.g. ``("wait",)``) when given."""
    extra = ["--first-token-delay", str(first_token_delay)] if first_token_delay else []
    if tools:
        extra += ["--tools", ",".join(tools)]
    result = subprocess.run(
        [
            PYTHON,
            str(BENCH / "_harness.py"),
            "setup",
            "--sessions",
            str(sessions),
            "--delay",
            str(delay),
            "--reply-words",
            str(reply_words),
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"bench setup failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _setup_main(argv: list[str]) -> None:
    """Child-process entry: create (or reuse) users and profile, create sessions, print JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--delay", type=float, required=True)
    parser.add_argument("--reply-words", type=int, default=0)
    parser.add_argument("--first-token-delay", type=float, default=0.0)
    parser.add_argument("--tools", default="", help="comma-separated demo tools to offer")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from agents.models import AgentProfile, ChatSession, ExtensionSetting
    from agents.profiles.demo import DEMO_PROFILES
    from agents.providers.registry import DemoSettings

    demo_extensions = list(DEMO_PROFILES[0].extensions)  # the `demo` profile's rows
    if args.tools:
        tools = [name for name in args.tools.split(",") if name]
        demo_extensions = [
            (key, priority, {"tools": tools} if key == "demo_tools" else settings)
            for key, priority, settings in demo_extensions
        ]

    users = get_user_model()
    user = users.objects.filter(username=USER).first() or users.objects.create_user(
        USER, password=PASSWORD
    )
    staff = users.objects.filter(username=STAFF).first() or users.objects.create_user(
        STAFF, password=PASSWORD, is_staff=True
    )
    provider_settings: dict[str, Any] = {"delay": args.delay}
    # The demo echoes at most 200 characters of the prompt; reply_words (when the registry
    # offers it) pads the answer to a fixed length instead.
    padded = "reply_words" in DemoSettings.model_fields and args.reply_words > 0
    if padded:
        provider_settings["reply_words"] = args.reply_words
    if args.first_token_delay:
        provider_settings["first_token_delay"] = args.first_token_delay
    profile = AgentProfile.objects.filter(slug=PROFILE_SLUG).first()
    if profile is None:
        profile = AgentProfile.objects.create(
            name="Bench agent",
            slug=PROFILE_SLUG,
            provider="demo",
            model_name="demo",
            provider_settings=provider_settings,
            double_texting="queue",
        )
        rows = [(key, priority, settings) for key, priority, settings in demo_extensions]
        rows.append((PROBE_KEY, 10_000, {}))
        ExtensionSetting.objects.bulk_create(
            ExtensionSetting(
                profile=profile, key=key, priority=priority, settings=settings, position=position
            )
            for position, (key, priority, settings) in enumerate(rows)
        )
    elif profile.provider_settings != provider_settings:
        profile.provider_settings = provider_settings
        profile.save()
    created = ChatSession.objects.bulk_create(
        ChatSession(owner=user, profile=profile) for _ in range(args.sessions)
    )
    print(
        json.dumps(
            {
                "sessions": [session.id for session in created],
                "user": user.username,
                "staff": staff.username,
                "password": PASSWORD,
                "provider_settings": provider_settings,
                "reply_words_supported": "reply_words" in DemoSettings.model_fields,
                "extensions": [row[0] for row in demo_extensions] + [PROBE_KEY],
            }
        )
    )


# -- HTTP login --------------------------------------------------------------------------

_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def _cookies(response: http.client.HTTPResponse) -> dict[str, str]:
    jar = {}
    for header, value in response.getheaders():
        if header.lower() == "set-cookie":
            name, _, rest = value.partition("=")
            jar[name.strip()] = rest.split(";", 1)[0]
    return jar


def login(server: Server, username: str, password: str) -> str:
    """Log in through POST /login/ with the CSRF token; the Cookie header for WebSockets."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", "/login/")
        response = connection.getresponse()
        page = response.read().decode()
        jar = _cookies(response)
        match = _CSRF_INPUT.search(page)
        if response.status != 200 or match is None or "csrftoken" not in jar:
            raise RuntimeError(f"GET /login/ gave {response.status} without a CSRF token")
        body = urlencode(
            {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": match.group(1),
                "next": "/",
            }
        )
        connection.request(
            "POST",
            "/login/",
            body=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={jar['csrftoken']}",
                "Origin": server.origin,
                "Referer": f"{server.url}/login/",
            },
        )
        response = connection.getresponse()
        response.read()
        jar.update(_cookies(response))
        if response.status != 302 or "sessionid" not in jar:
            raise RuntimeError(f"POST /login/ as {username} gave {response.status}, no session")
        return "; ".join(f"{name}={value}" for name, value in jar.items())
    finally:
        connection.close()


# -- WebSocket clients -------------------------------------------------------------------


async def open_ws(url: str, *, cookie: str = "", origin: str, timeout: float = 30.0) -> Any:
    """A websockets client connection with the session cookie and a matching Origin."""
    from websockets.asyncio.client import connect

    headers = {"Origin": origin}
    if cookie:
        headers["Cookie"] = cookie
    return await connect(
        url,
        additional_headers=headers,
        open_timeout=timeout,
        max_size=None,
        compression=None,  # the browser would compress; here it only costs client CPU
        ping_interval=None,
        close_timeout=2,
    )


# -- what-if patches (server side, opt-in) ------------------------------------------------

WHATIF_APP = "bench._harness:whatif_application"
WHATIF_CHOICES = ("dispatch", "layer", "switch")


def _apply_whatif(names: set[str]) -> None:
    if "dispatch" in names:
        from channels.consumer import AsyncConsumer, get_handler_name

        from agents.web import consumers

        async def dispatch(self: Any, message: dict[str, Any]) -> None:
            # Layer frames only render HTML: no ORM, so no connection hygiene thread hop.
            if message["type"].startswith(("run.", "monitor.")):
                handler = getattr(self, get_handler_name(message), None)
                if handler is not None:
                    await handler(message)
                    return
            await AsyncConsumer.dispatch(self, message)

        consumers._GroupConsumer.dispatch = dispatch  # type: ignore[method-assign]
    if "layer" in names:
        from channels.layers import InMemoryChannelLayer

        full_scan = InMemoryChannelLayer._clean_expired

        def clean_expired(self: Any) -> None:
            now = time.monotonic()
            if now < self.__dict__.get("_bench_next_clean", 0.0):
                return
            self.__dict__["_bench_next_clean"] = now + 1.0
            full_scan(self)

        InMemoryChannelLayer._clean_expired = clean_expired  # type: ignore[method-assign]
    if "switch" in names:
        # Each SQLite call releases the GIL; getting it back from a busy event loop waits a
        # whole switch interval, many times per ORM hop.
        sys.setswitchinterval(0.0005)


def __getattr__(name: str) -> Any:
    if name == "whatif_application":
        from zett_site.asgi import application

        names = {n.strip() for n in os.environ.get("ZETT_BENCH_WHATIF", "").split(",")}
        _apply_whatif(names & set(WHATIF_CHOICES))
        return application
    raise AttributeError(name)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "setup":
        _setup_main(sys.argv[2:])
    else:
        sys.exit("usage: _harness.py setup --sessions N --delay S [--reply-words W]")
