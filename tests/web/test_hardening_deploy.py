"""DJANGO_DEBUG=0 is deployable: check --deploy is clean, and one Daphne serves styled pages."""

from __future__ import annotations

import gzip
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0


def _production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The README's production settings (Deploying), on a scratch SQLite database."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ZETT_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="zett_site.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        ZETT_STATIC_ROOT=str(tmp_path / "static"),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    env = _production_env(tmp_path, DJANGO_SECURE="1")
    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout, result.stdout + result.stderr


def test_without_secure_the_check_names_what_to_set(tmp_path):
    """The guard above is real: DJANGO_SECURE=1 is what makes the warnings go away."""
    result = _manage(_production_env(tmp_path), "check", "--deploy")
    assert "security.W012" in result.stderr + result.stdout  # SESSION_COOKIE_SECURE


@pytest.fixture
def production_server(tmp_path: Path) -> Iterator[str]:
    """collectstatic, migrate, then `daphne` with DEBUG=0 and no proxy; its base URL."""
    env = _production_env(tmp_path)
    for args in (("collectstatic", "--noinput"), ("migrate", "--noinput")):
        result = _manage(env, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "daphne.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["zett_site.asgi:application"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=15) as response:
        return response.status, dict(response.headers), response.read()


def test_one_daphne_at_debug_0_serves_hashed_compressed_static_files(production_server):
    _, _, page = _get(f"{production_server}/login/")
    stylesheet = re.search(
        rb'<link rel="stylesheet" href="(/static/zett\.[0-9a-f]{12}\.css)"', page
    )
    assert stylesheet, page[:600]
    status, headers, body = _get(
        production_server + stylesheet.group(1).decode(), **{"Accept-Encoding": "gzip"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/css")
    assert headers.get("Content-Encoding") == "gzip"
    assert "immutable" in headers["Cache-Control"]  # a hashed name never changes content
    assert b".site-header" in gzip.decompress(body)
    # The scripts the pages load are there too.
    for script in re.findall(rb'<script src="(/static/[^"]+)"', page):
        assert _get(production_server + script.decode())[0] == 200, script
