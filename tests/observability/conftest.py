"""Fixtures for the observability tests: the run-hosting fixtures of tests/web, as they are."""

from __future__ import annotations

from tests.web.conftest import (  # noqa: F401 -- fixtures are found by name
    listen,
    listen_session,
    make_profile,
    make_session,
    manager,
)
