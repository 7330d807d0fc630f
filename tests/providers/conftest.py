"""Fixtures of the provider tests: the loopback server, a clean environment, each adapter.

The server, the wire builders and the adapter cases live in their own modules (loopback,
wire, adapters, streams); tests import from those, not from here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .adapters import ADAPTERS, Adapter
from .loopback import FakeServer, Reply
from .wire import anthropic_error, openai_error, openai_text

# test_failures_in_runs.py (the host's tests of provider failures) still imports these here.
__all__ = ["FakeServer", "Reply", "anthropic_error", "openai_error", "openai_text"]


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDKs read these on their own; a developer's shell must not change what tests see.
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_ADMIN_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_PROFILE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=ADAPTERS, ids=lambda adapter: adapter.name)
def adapter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Adapter:
    """Each SDK adapter in turn, with an API key in the variable it reads."""
    chosen: Adapter = request.param
    monkeypatch.setenv(chosen.key_env, chosen.key)
    return chosen
