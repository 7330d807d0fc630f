"""Shared fixtures: the file test database, service probes, users, channel-layer hygiene."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
# Password of every user the fixtures below create.
TEST_PASSWORD = "correct-horse-battery"


def _services_required() -> bool:
    return os.environ.get("REQUIRE_SERVICES", "") == "1"


def _unavailable(reason: str) -> None:
    if _services_required():
        pytest.fail(f"{reason} (REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(f"{reason} (set REQUIRE_SERVICES=1 to make this a failure)")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Put the SQLite test database in a file, not in memory.

    A second process (the Daphne server of tests/browser) can then open the same database
    and see what transactional tests commit. ZETT_TEST_DB_FILE, read by settings, wins.
    """
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        return
    test = database.setdefault("TEST", {})
    if not test.get("NAME"):
        test["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A URL for the `test` database on 127.0.0.1:5432; skips (or fails) when unreachable."""
    url = os.environ.get("ZETT_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    if not _port_open(POSTGRES_HOST, POSTGRES_PORT):
        _unavailable(f"PostgreSQL not reachable on {POSTGRES_HOST}:{POSTGRES_PORT}")
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        _unavailable(f"PostgreSQL on {POSTGRES_HOST}:{POSTGRES_PORT} refused {url}: {error}")
    return url


def _run_python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def postgres_process_env(postgres_url: str) -> Iterator[dict[str, str]]:
    """A freshly migrated PostgreSQL database of this test's own, dropped afterwards.

    Yields the environment of a process using it, for tests of what several processes do
    to one PostgreSQL database.
    """
    import urllib.parse

    import psycopg
    from psycopg import sql

    parts = urllib.parse.urlsplit(postgres_url)
    name = f"zett_process_{os.getpid()}"
    admin_url = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ZETT_", "DJANGO_", "DATABASE_URL"))
    }
    env.update(
        DATABASE_URL=urllib.parse.urlunsplit(parts._replace(path=f"/{name}")),
        DJANGO_SETTINGS_MODULE="zett_site.settings",
        DJANGO_SECRET_KEY="process-test-secret-key-long-enough-for-django-checks",
        PYTHONPATH=str(REPO_ROOT),
    )
    try:
        migrate = _run_python(["manage.py", "migrate", "--noinput"], env)
        assert migrate.returncode == 0, migrate.stderr
        yield env
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(drop)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A URL for Redis on 127.0.0.1:6379; skips (or fails) when it does not answer PING."""
    url = os.environ.get("ZETT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=0.5) as connection:
            connection.settimeout(2)
            connection.sendall(b"PING\r\n")
            answer = connection.recv(64)
    except OSError as error:
        _unavailable(f"Redis not reachable on {REDIS_HOST}:{REDIS_PORT}: {error}")
    if not answer.startswith((b"+PONG", b"-NOAUTH")):
        _unavailable(f"Redis on {REDIS_HOST}:{REDIS_PORT} answered PING with {answer!r}")
    return url


@pytest.fixture
def password() -> str:
    """The password of `user`, `staff_user` and `other_user`."""
    return TEST_PASSWORD


def _create_user(username: str, **extra: Any) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(
        username=username, email=f"{username}@example.com", password=TEST_PASSWORD, **extra
    )


@pytest.fixture
def user(db: None) -> Any:
    """An ordinary user "alice" (password: the `password` fixture)."""
    return _create_user("alice")


@pytest.fixture
def other_user(db: None) -> Any:
    """A second ordinary user "bob", for ownership checks."""
    return _create_user("bob")


@pytest.fixture
def staff_user(db: None) -> Any:
    """A staff user "operator" (admin, monitor); not a superuser."""
    return _create_user("operator", is_staff=True)


@pytest.fixture
async def channel_layer() -> AsyncIterator[Any]:
    """The configured channel layer, flushed before and after the test.

    The in-memory layer is a process-wide singleton whose queues belong to the event loop that
    first used them; flushing keeps one test's messages and loop out of the next test.
    """
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert layer is not None
    await layer.flush()
    yield layer
    await layer.flush()


@pytest.fixture
async def redis_channel_layer(redis_url: str) -> AsyncIterator[Any]:
    """A RedisChannelLayer on `redis_url` with a per-test key prefix, flushed and closed after."""
    from channels_redis.core import RedisChannelLayer

    prefix = f"zett-test-{os.getpid()}-{os.urandom(4).hex()}"
    layer = RedisChannelLayer(hosts=[redis_url], prefix=prefix, capacity=1000, expiry=60)
    yield layer
    await layer.flush()
    await layer.close_pools()


# -- a redis-server of one test's own (to stop and restart it) -------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A redis-server of the test's own, so stopping it touches nobody else."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
