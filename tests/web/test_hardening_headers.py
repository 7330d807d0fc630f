"""Every page carries a strict Content-Security-Policy and the other browser security headers,
and no page needs what that policy forbids (inline script, inline handlers, eval)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

REQUIRED_DIRECTIVES = {
    "script-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "connect-src": "'self'",
    "default-src": "'self'",
}


def _policy(response: Any) -> dict[str, str]:
    header = response.headers["Content-Security-Policy"]
    directives = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition(" ")
        directives[name] = value.strip()
    return directives


def _pages(client: Client, user: Any, staff_user: Any, make_chat: Any) -> dict[str, Any]:
    pages = {"login": client.get("/login/")}
    client.force_login(staff_user)
    session = make_chat(staff_user)
    pages["home"] = client.get("/")
    pages["chat"] = client.get(f"/sessions/{session.pk}/")
    pages["monitor"] = client.get("/monitor/")
    pages["admin"] = client.get("/admin/")
    pages["not found"] = client.get("/no-such-page/")
    return pages


@pytest.fixture
def make_chat() -> Any:
    from agents.models import AgentProfile, ChatSession

    def make(owner: Any) -> Any:
        profile = AgentProfile.objects.create(
            name="Headers", slug="headers", provider="demo", model_name="demo"
        )
        return ChatSession.objects.create(owner=owner, profile=profile)

    return make


def test_every_page_sends_a_strict_policy_and_the_other_headers(
    client, user, staff_user, make_chat
):
    for name, response in _pages(client, user, staff_user, make_chat).items():
        policy = _policy(response)
        for directive, value in REQUIRED_DIRECTIVES.items():
            assert policy.get(directive) == value, (name, directive, policy)
        header = response.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in header and "unsafe-eval" not in header, name
        assert response.headers["Referrer-Policy"] == "same-origin", name
        assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin", name
        assert "camera=()" in response.headers["Permissions-Policy"], name
        assert response.headers["X-Frame-Options"] == "DENY", name
        assert response.headers["X-Content-Type-Options"] == "nosniff", name


SCRIPT_TAG = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S | re.I)
INLINE_HANDLER = re.compile(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", re.I)


def test_pages_need_no_inline_script_handlers_or_eval(client, user, staff_user, make_chat):
    for name, response in _pages(client, user, staff_user, make_chat).items():
        page = response.content.decode()
        for attributes, body in SCRIPT_TAG.findall(page):
            assert "src=" in attributes and not body.strip(), (name, attributes, body[:80])
        assert not INLINE_HANDLER.search(page), (name, INLINE_HANDLER.search(page))
        if name in {"chat", "monitor", "home", "login"}:
            meta = re.search(r'<meta name="htmx-config" content=\'([^\']*)\'>', page)
            assert meta, name
            config = json.loads(meta.group(1))
            assert config["allowEval"] is False and config["allowScriptTags"] is False
            # htmx would otherwise insert a <style> element, which style-src 'self' blocks.
            assert config["includeIndicatorStyles"] is False
