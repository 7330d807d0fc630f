"""Scale-out harness: a PostgreSQL database per test session, real Daphne processes, clients.

Everything here talks to the processes the way a deployment's users do: over HTTP (login) and
WebSockets (the chat and monitor sockets), while the test reads and seeds the shared
PostgreSQL database directly through a Django connection alias of its own ("scale"). The
processes share one Redis database index, flushed before each test's processes start and
after they stop. Every process started is stopped at teardown; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "scale-test-password"
START_TIMEOUT = 30.0  # a Daphne process imports Django, the app and recovers runs first
# A safety net for frames a correct cluster sends promptly (cross-process hops included).
FRAME_TIMEOUT = 15.0
# Short timings so crash recovery takes seconds; tests of the defaults drop them.
FAST_TIMINGS = {"ZETT_HEARTBEAT_SECONDS": "0.5", "ZETT_STALE_RUN_SECONDS": "3"}
SCALE_ALIAS = "scale"
LOGS_KEY = pytest.StashKey[list[Path]]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).is_relative_to(here):
            item.add_marker(pytest.mark.scale)
            item.add_marker(pytest.mark.services)


# -- the database -------------------------------------------------------------------------


def _pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


@dataclass(frozen=True, slots=True)
class ScaleDatabase:
    """The per-session PostgreSQL database every process of the scale tests shares."""

    url: str  # DATABASE_URL for the processes
    name: str
    redis_url: str  # REDIS_URL for the processes (a dedicated database index)
    secret_key: str  # DJANGO_SECRET_KEY shared by every process


@pytest.fixture(scope="session")
def scale_database(postgres_url: str, redis_url: str) -> Iterator[ScaleDatabase]:
    """Create `zett_scale_<pid>`, migrate it, register it as the "scale" alias; drop it after."""
    from django.db import DEFAULT_DB_ALIAS, connections
    from psycopg import sql

    parts = urllib.parse.urlsplit(postgres_url)
    name = f"zett_scale_{os.getpid()}"
    admin_url = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    url = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    redis_db = int(os.environ.get("ZETT_SCALE_REDIS_DB", "13"))
    redis_parts = urllib.parse.urlsplit(redis_url)
    scale_redis = urllib.parse.urlunsplit(redis_parts._replace(path=f"/{redis_db}"))
    with _pg_connect(admin_url) as admin:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        admin.execute(drop)  # a database left by an earlier session of this pid
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    database = ScaleDatabase(url, name, scale_redis, secrets.token_urlsafe(40))
    try:
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=REPO_ROOT,
            env=process_env(database),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if migrate.returncode != 0:
            pytest.fail(f"migrate failed:\n{migrate.stdout}\n{migrate.stderr}", pytrace=False)
        # configure_settings fills in every default key, and insists on a "default" alias.
        connections.settings[SCALE_ALIAS] = connections.configure_settings(
            {
                DEFAULT_DB_ALIAS: dict(connections.settings[DEFAULT_DB_ALIAS]),
                SCALE_ALIAS: {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": name,
                    "USER": parts.username or "postgres",
                    "PASSWORD": urllib.parse.unquote(parts.password or ""),
                    "HOST": parts.hostname or "127.0.0.1",
                    "PORT": str(parts.port or 5432),
                    "CONN_MAX_AGE": 0,
                },
            }
        )[SCALE_ALIAS]
        yield database
    finally:
        with _pg_connect(admin_url) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(autouse=True)
def _allow_scale_db(django_db_blocker: Any) -> Iterator[None]:
    """The scale tests use their own alias, not pytest-django's test database."""
    with django_db_blocker.unblock():
        yield


def process_env(database: ScaleDatabase, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server or worker process of the cluster."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ZETT_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    env.update(
        DATABASE_URL=database.url,
        REDIS_URL=database.redis_url,
        DJANGO_SECRET_KEY=database.secret_key,
        DJANGO_DEBUG="0",
        ZETT_SERVE_STATIC="0",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SETTINGS_MODULE="zett_site.settings",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return {key: value for key, value in env.items() if value is not None}


def flush_redis_db(database: ScaleDatabase) -> None:
    """FLUSHDB on the cluster's own Redis database index (nothing else)."""
    import redis

    client = redis.Redis.from_url(database.redis_url, socket_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


# -- seeding and reading the database ------------------------------------------------------


class ScaleRows:
    """Sync ORM helpers on the "scale" alias; `await rows.call(fn, ...)` from async tests."""

    def __init__(self) -> None:
        self._hash: str | None = None

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from asgiref.sync import sync_to_async

        return await sync_to_async(fn)(*args, **kwargs)

    def password_hash(self) -> str:
        from django.contrib.auth.hashers import make_password

        if self._hash is None:  # hashing is deliberately slow: once per session of tests
            self._hash = make_password(PASSWORD)
        return self._hash

    def create_user(self, username: str, *, staff: bool = False) -> Any:
        from django.contrib.auth import get_user_model

        return (
            get_user_model()
            .objects.using(SCALE_ALIAS)
            .create(username=username, password=self.password_hash(), is_staff=staff)
        )

    def create_profile(
        self,
        slug: str,
        *,
        provider: str = "demo",
        model_name: str = "",
        provider_settings: dict[str, Any] | None = None,
        extensions: tuple[tuple[str, dict[str, Any]], ...] = (),
        double_texting: str = "steer",
    ) -> Any:
        from agents.models import AgentProfile, ExtensionSetting

        profile = AgentProfile.objects.using(SCALE_ALIAS).create(
            name=slug,
            slug=slug,
            provider=provider,
            model_name=model_name or provider,
            provider_settings=provider_settings if provider_settings is not None else {"delay": 0},
            double_texting=double_texting,
        )
        for position, (key, settings) in enumerate(extensions):
            ExtensionSetting.objects.using(SCALE_ALIAS).create(
                profile=profile, key=key, settings=settings, position=position
            )
        return profile

    def create_sessions(self, owner: Any, profile: Any, count: int = 1) -> list[str]:
        from agents.models import ChatSession

        sessions = [ChatSession(owner=owner, profile=profile) for _ in range(count)]
        ChatSession.objects.using(SCALE_ALIAS).bulk_create(sessions)
        return [session.id for session in sessions]

    def runs(self, session_id: str) -> list[Any]:
        """The session's runs, oldest first."""
        from agents.models import Run

        return list(Run.objects.using(SCALE_ALIAS).filter(session_id=session_id).order_by("id"))

    def run(self, request_id: str) -> Any:
        from agents.models import Run

        return Run.objects.using(SCALE_ALIAS).get(request_id=request_id)

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        """The session's persisted messages in order, as plain dicts."""
        from agents.models import Message

        return list(
            Message.objects.using(SCALE_ALIAS)
            .filter(session_id=session_id)
            .order_by("seq")
            .values(
                "seq",
                "message_id",
                "role",
                "content",
                "tool_calls",
                "tool_call_id",
                "run__request_id",
            )
        )

    def execute(self, fn: Callable[[str], Any]) -> Any:
        """fn(alias) for anything else (bulk counts, hand-made rows)."""
        return fn(SCALE_ALIAS)


@pytest.fixture
async def rows(scale_database: ScaleDatabase) -> AsyncIterator[ScaleRows]:
    """ORM access to the cluster's database (seed users, profiles, sessions; read runs)."""
    from django.db import connections

    helper = ScaleRows()
    yield helper
    # Closed on the thread that opened it, so no connection outlives the test.
    await helper.call(lambda: connections[SCALE_ALIAS].close())


async def poll(
    probe: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """Await probe() until it returns something truthy; TimeoutError naming `what` otherwise.

    Only for state another process writes to the database, which offers no notification.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s: {what or probe}")
        await asyncio.sleep(interval)


# -- processes -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(eq=False)
class ClusterProcess:
    """One Daphne (or runworker) subprocess of the cluster."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int | None = None  # None for a worker

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def hosts(self, host: str) -> bool:
        """Whether a Run.host value names this process (host:pid:nonce)."""
        parts = host.split(":")
        return len(parts) == 3 and parts[1] == str(self.pid)

    def log(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crashed machine."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class Cluster:
    """Starts named processes against the scale database; stops all of them at teardown."""

    database: ScaleDatabase
    log_dir: Path
    processes: list[ClusterProcess] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> ClusterProcess:
        log_path = self.log_dir / f"{name}.log"
        self.log_paths.append(log_path)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return ClusterProcess(name, process, log_path)

    def start(
        self,
        count: int = 1,
        *,
        env: dict[str, str] | None = None,
        defaults: bool = False,
        names: tuple[str, ...] = (),
    ) -> list[ClusterProcess]:
        """Start `count` Daphne processes and wait until each accepts connections.

        `defaults=True` leaves the heartbeat and stale-run timings at their defaults.
        """
        extra = {**({} if defaults else FAST_TIMINGS), **(env or {})}
        started = []
        for index in range(count):
            port = _free_port()
            name = names[index] if index < len(names) else f"daphne-{len(self.processes) + 1}"
            command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            command.append("zett_site.asgi:application")
            member = self._spawn(name, command, process_env(self.database, extra))
            member.port = port
            self.processes.append(member)
            started.append(member)
        for member in started:
            self._wait_accepting(member)
        return started

    def start_worker(
        self, *, env: dict[str, str] | None = None, name: str = "worker"
    ) -> ClusterProcess:
        """`manage.py runworker zett-runs`; it reads the channel from Redis, so no port."""
        extra = {**FAST_TIMINGS, **(env or {})}
        command = [sys.executable, "manage.py", "runworker", "zett-runs"]
        member = self._spawn(name, command, process_env(self.database, extra))
        self.processes.append(member)
        return member

    def _wait_accepting(self, member: ClusterProcess) -> None:
        assert member.port is not None
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if member.process.poll() is not None:
                raise RuntimeError(
                    f"{member.name} exited with {member.process.returncode}:\n{member.log()}"
                )
            try:
                socket.create_connection(("127.0.0.1", member.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{member.name} did not accept within {START_TIMEOUT} s:\n{member.log()}"
                    ) from None
                time.sleep(0.05)

    def stop_all(self) -> None:
        for member in self.processes:
            member.stop()


@pytest.fixture
def daphne_cluster(
    scale_database: ScaleDatabase,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Cluster]:
    """A Cluster: `cluster.start(n)` -> n running Daphne processes (see ClusterProcess)."""
    flush_redis_db(scale_database)
    cluster = Cluster(scale_database, tmp_path)
    request.node.stash[LOGS_KEY] = cluster.log_paths  # shown when the test fails
    try:
        yield cluster
    finally:
        cluster.stop_all()
        flush_redis_db(scale_database)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and report.when in {"call", "teardown"}:
        for path in item.stash.get(LOGS_KEY, []):
            if path.exists():
                text = path.read_bytes().decode(errors="replace")
                report.sections.append((f"process log {path.name}", text[-20_000:]))
    return report


# -- HTTP login and WebSocket clients ------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def login(base_url: str, username: str, password: str = PASSWORD) -> str:
    """Log in through the login page; returns the Cookie header value for the sockets."""
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)
    with opener.open(f"{base_url}/login/", timeout=15) as response:
        assert response.status == 200
    token = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    ).encode()
    try:
        opener.open(f"{base_url}/login/", data=body, timeout=15)
        raise AssertionError(f"login of {username} did not redirect (wrong password?)")
    except urllib.error.HTTPError as error:  # the 302 the no-redirect handler leaves alone
        assert error.code == 302, f"login of {username} answered {error.code}"
    cookies = {cookie.name: cookie.value for cookie in jar}
    assert "sessionid" in cookies, f"login of {username} set no session cookie"
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


async def alogin(base_url: str, username: str, password: str = PASSWORD) -> str:
    return await asyncio.to_thread(login, base_url, username, password)


class SocketClient:
    """A WebSocket client collecting every text frame it receives, in order."""

    def __init__(self, connection: Any, label: str) -> None:
        self.connection = connection
        self.label = label
        self.frames: list[str] = []
        self.closed = asyncio.Event()
        self._arrived = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name=f"ws-reader-{label}")

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for frame in self.connection:
                self.frames.append(frame if isinstance(frame, str) else frame.decode())
                self._arrived.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()
            self._arrived.set()

    async def send(self, **frame: Any) -> None:
        await self.connection.send(json.dumps(frame))

    def mark(self) -> int:
        """A cursor: `wait_for(..., after=client.mark())` looks only at later frames."""
        return len(self.frames)

    async def wait_for(
        self,
        predicate: Callable[[str], Any],
        *,
        after: int = 0,
        timeout: float = FRAME_TIMEOUT,
        what: str = "",
    ) -> tuple[int, Any]:
        """(index, predicate result) of the first frame at or after `after` that matches."""
        deadline = time.monotonic() + timeout
        index = after
        while True:
            while index < len(self.frames):
                found = predicate(self.frames[index])
                if found:
                    return index, found
                index += 1
            if self.closed.is_set():
                raise AssertionError(f"{self.label} closed before {what or predicate}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tail = "\n---\n".join(f[:600] for f in self.frames[-5:])
                raise TimeoutError(
                    f"{self.label}: no {what or predicate} within {timeout} s; last frames:\n{tail}"
                )
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                pass

    async def wait_search(
        self, pattern: str, *, after: int = 0, timeout: float = FRAME_TIMEOUT
    ) -> tuple[int, re.Match[str]]:
        compiled = re.compile(pattern, re.S)
        return await self.wait_for(compiled.search, after=after, timeout=timeout, what=pattern)

    def search_all(self, pattern: str, *, after: int = 0) -> list[re.Match[str]]:
        compiled = re.compile(pattern, re.S)
        return [m for frame in self.frames[after:] for m in compiled.finditer(frame)]

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.connection.close(), 5)
        except (TimeoutError, OSError):
            pass
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


@pytest.fixture
async def sockets() -> AsyncIterator[Callable[..., Any]]:
    """open(process, path, cookie, label=...) -> a SocketClient; all closed after the test.

    The client waits for the socket's first frame (the chat snapshot or the monitor tables),
    which the consumers send only after joining their groups, so frames published after
    `open` returns reach it.
    """
    from websockets.asyncio.client import connect

    opened: list[SocketClient] = []

    async def open_socket(
        member: ClusterProcess, path: str, cookie: str, *, label: str = ""
    ) -> SocketClient:
        connection = await connect(
            f"{member.ws_url}{path}",
            origin=member.url,  # type: ignore[arg-type]
            additional_headers={"Cookie": cookie},
            open_timeout=15,
            max_size=2**22,
        )
        client = SocketClient(connection, label or f"{member.name}{path}")
        opened.append(client)
        await client.wait_for(lambda frame: True, timeout=FRAME_TIMEOUT, what="first frame")
        return client

    try:
        yield open_socket
    finally:
        await asyncio.gather(*(client.close() for client in opened))


def chat_path(session_id: str) -> str:
    return f"/ws/sessions/{session_id}/"


MONITOR_PATH = "/ws/monitor/"

# -- reading the fragments the sockets send ------------------------------------------------

RUN_STATUS = (
    r'<div id="run-status"[^>]*data-status="(?P<status>[^"]*)" data-phase="(?P<phase>[^"]*)"'
    r' data-cancel-state="(?P<cancel>[^"]*)"'
)
DELTA = r'hx-swap-oob="beforeend:#answer-[^"]*">(?P<text>[^<]*)</span>'
REPLY = (
    r'data-reply="(?P<outcome>accepted|rejected)" data-action="(?P<action>[^"]*)">'
    r"(?P<text>[^<]*)"
)
ASSISTANT = r'data-role="assistant" data-message-id="(?P<id>[^"]+)">(?P<body>.*?)</article>'


def status_of(frame: str) -> dict[str, str] | None:
    """The run-status bar a frame carries (status, phase, cancel), if any."""
    match = re.search(RUN_STATUS, frame)
    return match.groupdict() if match else None


def monitor_row(request_id: str, status: str | None = None) -> str:
    """A pattern for the monitor row of a run (optionally in a given status)."""
    wanted = re.escape(status) if status else '[^"]*'
    return (
        rf'data-testid="monitor-row" data-request-id="{re.escape(request_id)}"'
        rf'[^>]*? data-status="(?P<status>{wanted})"'
    )


# -- a Chat Completions server that checks what a real provider checks ---------------------------


class FakeChatServer:
    """An OpenAI-compatible /v1/chat/completions endpoint on a thread, recording requests.

    Like the real API it refuses (400) a history in which an assistant tool call is not
    followed by a tool result for it, so a run that sends a dangling call fails.
    `respond(messages)` returns ("text", str) or ("tool", name, arguments).
    """

    def __init__(self, respond: Callable[[list[dict[str, Any]]], tuple[Any, ...]]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.refused: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                problem = dangling_tool_call(body.get("messages") or [])
                if problem:
                    server.refused.append(problem)
                    payload = json.dumps(
                        {"error": {"message": problem, "type": "invalid_request_error"}}
                    ).encode()
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in sse_chunks(body.get("model", ""), server.respond(body["messages"])):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def dangling_tool_call(messages: list[dict[str, Any]]) -> str:
    """What a provider says about a tool call without its result ("" when none)."""
    open_calls: set[str] = set()
    for message in messages:
        if message.get("role") == "tool":
            open_calls.discard(message.get("tool_call_id", ""))
            continue
        if open_calls:
            break
        open_calls = {call["id"] for call in message.get("tool_calls") or []}
    if open_calls:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. Missing: {sorted(open_calls)}"
        )
    return ""


def sse_chunks(model: str, answer: tuple[Any, ...]) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    if answer[0] == "tool":
        _, name, arguments = answer
        call = {
            "index": 0,
            "id": f"call_{secrets.token_hex(6)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        chunks = [chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls")]
    else:
        words = answer[1].split(" ")
        chunks = [chunk({"role": "assistant", "content": ""})]
        chunks += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
        chunks.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    chunks.append({**chunk({}), "choices": [], "usage": usage})
    return chunks


@pytest.fixture
def fake_chat_server() -> Iterator[Callable[..., FakeChatServer]]:
    """start(respond) -> a running FakeChatServer; shut down after the test."""
    servers: list[FakeChatServer] = []

    def start(respond: Callable[[list[dict[str, Any]]], tuple[Any, ...]]) -> FakeChatServer:
        server = FakeChatServer(respond)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.close()
