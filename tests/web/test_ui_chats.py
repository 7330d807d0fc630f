"""Owners manage their chats: search by title and content, rename, delete, see last outcomes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import AgentProfile, ChatSession, Message, Run, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile() -> AgentProfile:
    return AgentProfile.objects.create(name="Demo", slug="demo-chats", provider="demo")


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(page: str) -> list[str]:
    return page.split('data-testid="session-row"')[1:]


def test_search_finds_my_chats_by_title_or_message_text_only(
    user: Any, other_user: Any, profile: AgentProfile
) -> None:
    by_title = ChatSession.objects.create(owner=user, profile=profile, title="Tax return 2026")
    by_text = ChatSession.objects.create(owner=user, profile=profile, title="Misc")
    Message.objects.create(
        session=by_text, seq=1, message_id="m1", role="user", content="my TAX form"
    )
    ChatSession.objects.create(owner=user, profile=profile, title="Holiday")
    theirs = ChatSession.objects.create(owner=other_user, profile=profile, title="tax of theirs")

    page = _client(user).get("/?q=tax").content.decode()
    rows = _rows(page)
    assert len(rows) == 2
    assert any(by_title.pk in row for row in rows) and any(by_text.pk in row for row in rows)
    assert theirs.pk not in page and "Holiday" not in page
    assert "No chat matches" in _client(user).get("/?q=nothing-like-it").content.decode()


def test_the_list_shows_each_chats_last_run_outcome(user: Any, profile: AgentProfile) -> None:
    session = ChatSession.objects.create(owner=user, profile=profile, title="Outcomes")
    Run.objects.create(session=session, input_text="a", status=RunStatus.COMPLETED)
    Run.objects.create(session=session, input_text="b", status=RunStatus.CANCELLED)
    [row] = _rows(_client(user).get("/").content.decode())
    outcome = row.split('data-testid="last-outcome"')[1].split("</td>")[0]
    assert ">stopped<" in outcome


def test_the_owner_renames_and_deletes_a_chat_and_others_get_a_404(
    user: Any, other_user: Any, profile: AgentProfile
) -> None:
    session = ChatSession.objects.create(owner=user, profile=profile, title="Old name")
    Message.objects.create(session=session, seq=1, message_id="m1", role="user", content="hi")
    assert (
        _client(other_user).post(f"/sessions/{session.pk}/rename/", {"title": "X"}).status_code
        == 404
    )
    assert _client(other_user).post(f"/sessions/{session.pk}/delete/").status_code == 404

    owner = _client(user)
    owner.post(f"/sessions/{session.pk}/rename/", {"title": "  New   name "})
    session.refresh_from_db()
    assert session.title == "New name"
    response = owner.post(f"/sessions/{session.pk}/delete/", follow=True)
    assert "Deleted “New name”." in response.content.decode()
    assert not ChatSession.objects.filter(pk=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()


def test_a_chat_with_a_run_in_progress_is_not_deleted(user: Any, profile: AgentProfile) -> None:
    session = ChatSession.objects.create(owner=user, profile=profile, title="Busy")
    Run.objects.create(session=session, input_text="a", status=RunStatus.RUNNING)
    response = _client(user).post(f"/sessions/{session.pk}/delete/", follow=True)
    assert "has a run in progress" in response.content.decode()
    assert ChatSession.objects.filter(pk=session.pk).exists()


def test_a_pinned_chat_comes_first_and_unpinning_restores_the_order(
    user: Any, profile: AgentProfile
) -> None:
    older = ChatSession.objects.create(owner=user, profile=profile, title="Older")
    ChatSession.objects.create(owner=user, profile=profile, title="Newer")
    ChatSession.objects.filter(pk=older.pk).update(updated_at=timezone.now() - timedelta(days=1))
    client = _client(user)
    assert ["Newer" in row for row in _rows(client.get("/").content.decode())] == [True, False]

    response = client.post(f"/sessions/{older.pk}/pin/", {"value": "1", "next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    rows = _rows(client.get("/").content.decode())
    assert "Older" in rows[0] and 'data-testid="pinned"' in rows[0] and "Unpin" in rows[0]

    client.post(f"/sessions/{older.pk}/pin/", {"value": "0"})
    rows = _rows(client.get("/").content.decode())
    assert "Newer" in rows[0] and 'data-testid="pinned"' not in "".join(rows)


def test_an_archived_chat_leaves_the_list_but_not_search_nor_its_archive(
    user: Any, profile: AgentProfile
) -> None:
    session = ChatSession.objects.create(owner=user, profile=profile, title="Old taxes")
    ChatSession.objects.create(owner=user, profile=profile, title="Current")
    client = _client(user)
    response = client.post(f"/sessions/{session.pk}/archive/", {"value": "1"}, follow=True)
    page = response.content.decode()
    assert "Archived “Old taxes”" in page
    assert [("Old taxes" in row) for row in _rows(page)] == [False]

    archive = _rows(client.get("/?archived=1").content.decode())
    assert len(archive) == 1 and "Old taxes" in archive[0] and "Unarchive" in archive[0]
    found = _rows(client.get("/?q=taxes").content.decode())
    assert len(found) == 1 and 'data-testid="archived"' in found[0]
    # the chat itself still opens and works
    assert client.get(f"/sessions/{session.pk}/").status_code == 200

    client.post(f"/sessions/{session.pk}/archive/", {"value": "0"})
    assert len(_rows(client.get("/").content.decode())) == 2


def test_only_the_owner_pins_or_archives_and_only_by_post_back_to_a_local_page(
    user: Any, other_user: Any, profile: AgentProfile
) -> None:
    session = ChatSession.objects.create(owner=user, profile=profile, title="Mine")
    stranger = _client(other_user)
    assert stranger.post(f"/sessions/{session.pk}/pin/", {"value": "1"}).status_code == 404
    assert stranger.post(f"/sessions/{session.pk}/archive/", {"value": "1"}).status_code == 404
    owner = _client(user)
    assert owner.get(f"/sessions/{session.pk}/pin/").status_code == 405
    response = owner.post(
        f"/sessions/{session.pk}/pin/", {"value": "1", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/"  # an outside "next" is ignored
    session.refresh_from_db()
    assert session.pinned and not session.archived
