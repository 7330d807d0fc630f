"""Browser-test harness: a real Daphne subprocess on the test database, and Playwright Chromium.

Browser tests are sync tests using `transactional_db`, so what they create is committed and
the server process, which opens the same database file, sees it. The server never migrates:
pytest-django has already built the test database before the server starts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

CHROMIUM = os.environ.get("ZETT_CHROMIUM", "/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT = 30.0
SERVER_LOG_KEY = pytest.StashKey[Path]()
SERVER_LOG_OFFSET_KEY = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything here `browser`, and run browser tests after all others.

    Playwright's sync API leaves its event loop marked running on the main thread for as long
    as the session-scoped browser lives; any asyncio test after it would fail with "Cannot run
    the event loop while another loop is running". trylast: after pytest-django's reordering.
    """
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.path)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)
    uses_browser = [
        item
        for item in items
        if item.get_closest_marker("browser") or "browser" in getattr(item, "fixturenames", ())
    ]
    others = [item for item in items if item not in uses_browser]
    items[:] = others + uses_browser


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _database_url(settings_dict: dict[str, Any]) -> str:
    """The DATABASE_URL under which another process opens this (test) database."""
    engine = settings_dict["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        name = str(settings_dict["NAME"])
        if name == ":memory:" or name.startswith("file:"):
            raise RuntimeError("browser tests need a file test database, not an in-memory one")
        return f"sqlite:///{Path(name).resolve()}"
    if engine == "django.db.backends.postgresql":
        user = quote(settings_dict.get("USER") or "", safe="")
        password = quote(settings_dict.get("PASSWORD") or "", safe="")
        credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = settings_dict.get("HOST") or "127.0.0.1"
        port = settings_dict.get("PORT") or 5432
        return f"postgres://{credentials}{host}:{port}/{quote(settings_dict['NAME'], safe='')}"
    raise RuntimeError(f"no DATABASE_URL form for {engine}")


def _read_log(path: Path, offset: int = 0) -> str:
    with path.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


class DaphneServer:
    """A running `daphne` subprocess; `url` is its base URL without a trailing slash."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path

    def log(self, offset: int = 0) -> str:
        return _read_log(self.log_path, offset)


@contextlib.contextmanager
def _running_daphne(log_path: Path) -> Iterator[DaphneServer]:
    """A `python -m daphne` on a free port against the test database, stopped on exit."""
    from django.conf import settings
    from django.db import connections

    port = _free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"ZETT_TEST_DB_FILE", "DJANGO_ALLOW_ASYNC_UNSAFE", "DATABASE_URL"}
    }
    env.update(
        DATABASE_URL=_database_url(connections["default"].settings_dict),
        # The same key as the test process, so sessions signed here are valid there.
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        DJANGO_DEBUG="0",
        ZETT_SERVE_STATIC="1",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SETTINGS_MODULE="zett_site.settings",
        PYTHONUNBUFFERED="1",
    )
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    command.append("zett_site.asgi:application")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    server = DaphneServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"Daphne exited with {process.returncode} before serving:\n{server.log()}",
                    pytrace=False,
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"Daphne did not accept on port {port} within {SERVER_START_TIMEOUT}s:\n"
                        f"{server.log()}",
                        pytrace=False,
                    )
                time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def daphne_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaphneServer]:
    """Start `python -m daphne` on a free port against the test database; stop it at the end."""
    with _running_daphne(tmp_path_factory.mktemp("daphne") / "server.log") as server:
        yield server


@pytest.fixture
def fresh_live_url(
    transactional_db: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """Base URL of a Daphne started for this test alone.

    For pages that write rows pointing at content types (the admin's change history): the
    shared server caches content type ids, which the flush between transactional tests
    renumbers, so a save there can fail on a foreign key that only exists in the test run.
    """
    log_path = tmp_path / "server.log"
    with _running_daphne(log_path) as server:
        request.node.stash[SERVER_LOG_KEY] = log_path
        request.node.stash[SERVER_LOG_OFFSET_KEY] = 0
        yield server.url


@pytest.fixture
def live_url(
    daphne_server: DaphneServer, transactional_db: None, request: pytest.FixtureRequest
) -> str:
    """Base URL of the Daphne server (e.g. http://127.0.0.1:43123), for one test.

    Requests `transactional_db`, so the test's writes are committed and visible to the server.
    On failure the server's output during this test is added to the report.
    """
    request.node.stash[SERVER_LOG_KEY] = daphne_server.log_path
    request.node.stash[SERVER_LOG_OFFSET_KEY] = daphne_server.log_path.stat().st_size
    return daphne_server.url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    log_path = item.stash.get(SERVER_LOG_KEY, None)
    if log_path is not None and report.failed and report.when in {"setup", "call"}:
        offset = item.stash.get(SERVER_LOG_OFFSET_KEY, 0)
        report.sections.append(("Daphne server output", _read_log(log_path, offset)))
    return report


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Debian Chromium driven by Playwright's sync API (never a downloaded one)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium", pytrace=False)
    from playwright.sync_api import sync_playwright

    # That running loop also trips Django's async-safety check on every ORM call a browser
    # test makes. Set for the browser tests only (they run last); never in production code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield chromium
        finally:
            chromium.close()
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def new_context(browser: Any) -> Iterator[Callable[..., Any]]:
    """Factory for extra isolated browser contexts (a second user, a second tab group)."""
    contexts: list[Any] = []

    def make(**options: Any) -> Any:
        context = browser.new_context(**options)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_context: Callable[..., Any]) -> Any:
    """A fresh page in its own context (own cookies)."""
    return new_context().new_page()


def login(page: Any, base_url: str, username: str, password: str) -> None:
    """Log in through the real login page and wait until the site header shows the user."""
    page.goto(f"{base_url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_selector(f"[data-testid=username]:text-is('{username}')")


@pytest.fixture(name="login")
def login_fixture(live_url: str) -> Callable[..., None]:
    """`login(page, username, password)` against the running server (or ``base_url``)."""

    def do_login(page: Any, username: str, password: str, base_url: str | None = None) -> None:
        login(page, base_url or live_url, username, password)

    return do_login
