"""A trace id leads back to its run: the admin's Run search takes what the run page shows."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agents.extensions.tracing import request_id_of_trace, trace_id_of
from agents.models import AgentProfile, ChatSession, Run
from agents.runtime.ids import new_uuid7


def test_a_trace_id_names_its_request_id_in_every_spelling() -> None:
    request_id = new_uuid7()
    hex32 = f"{trace_id_of(request_id):032x}"
    assert hex32 == request_id.replace("-", "")  # what the run page shows
    for spelling in (
        hex32,
        hex32.upper(),
        f"0x{hex32}",
        f" {hex32} ",
        f"00-{hex32}-00f067aa0ba902b7-01",
    ):
        assert request_id_of_trace(spelling) == request_id, spelling
    for other in ("", "abc", hex32[:-1], hex32 + "0", "0" * 32, "g" * 32, request_id):
        assert request_id_of_trace(other) is None, other


def _runs(owner: Any, count: int) -> list[Run]:
    profile = AgentProfile.objects.create(name="P", slug="p", provider="demo")
    session = ChatSession.objects.create(owner=owner, profile=profile)
    return [
        Run.objects.create(
            session=session, profile=profile, input_text=f"run {n}", status="completed"
        )
        for n in range(count)
    ]


def _listed(client: Client, query: str) -> str:
    response = client.get("/admin/agents/run/", {"q": query})
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_admin_finds_a_run_by_the_trace_id_its_page_shows(
    client: Client, staff_user: Any, user: Any
) -> None:
    from django.contrib.auth.models import Permission

    staff_user.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(staff_user)
    wanted, other, _ = _runs(user, 3)
    page = client.get(f"/runs/{wanted.request_id}/")
    shown = page.content.decode().split('data-testid="trace-id">')[1].split("<")[0]

    for query in (shown, f"00-{shown}-00f067aa0ba902b7-01"):
        listed = _listed(client, query)
        assert wanted.request_id in listed, query
        assert other.request_id not in listed
        assert "1 result" in listed

    # The ordinary search still works, and a trace id of no run finds nothing.
    assert other.request_id in _listed(client, other.request_id)
    assert wanted.request_id not in _listed(client, "f" * 32)


@pytest.mark.django_db
def test_only_staff_reach_the_run_search(client: Client, user: Any, password: str) -> None:
    (run,) = _runs(user, 1)
    client.login(username=user.username, password=password)
    response = client.get("/admin/agents/run/", {"q": run.request_id.replace("-", "")})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
