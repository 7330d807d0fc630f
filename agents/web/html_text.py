"""Escaping and links for the fragments built in Python instead of templates (the hot ones).

``escape`` replaces the same five characters as Django's, without its lazy-string wrapper;
``text`` shows a value as ``{{ value }}`` would, "" when absent. The links of runs and
sessions are reversed once each and kept.
"""

from __future__ import annotations

from functools import lru_cache
from html import escape as _escape
from typing import Any

from django.urls import reverse

_LINKS = 4096  # runs and sessions whose links are kept without another reverse()


def escape(value: Any) -> str:
    """Django's escape (the same five characters) without its lazy-string wrapper."""
    return _escape(str(value))


def text(value: Any) -> str:
    """A value as ``{{ value }}`` shows it: "" when absent, escaped otherwise."""
    return "" if value is None or value == "" else escape(value)


@lru_cache(maxsize=_LINKS)
def session_url(session_id: str) -> str:
    """The chat page's link, escaped for an attribute."""
    return escape(reverse("agents:session", args=[session_id]))


@lru_cache(maxsize=_LINKS)
def run_url(request_id: str) -> str:
    """The run trace page's link, escaped for an attribute."""
    return escape(reverse("agents:run", args=[request_id]))
