"""Managing one's chats: the searchable list, renaming, pinning, archiving and deleting a chat."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from ..models import ChatSession, Run, RunStatus
from .access import may_use_session

MAX_TITLE = 200


def listed(user: Any, query: str = "", *, archived: bool = False) -> QuerySet[ChatSession]:
    """The user's chats, pinned first, then newest activity first, with their last run's
    outcome. Without ``query``: the archived chats when ``archived``, else the others; a
    ``query`` matches titles and message text (case-insensitive) of every chat, archived too."""
    latest = Run.objects.filter(session=OuterRef("pk")).order_by("-created_at")
    sessions = (
        ChatSession.objects.filter(owner=user)
        .select_related("profile")
        .annotate(last_outcome=Subquery(latest.values("status")[:1]))
    )
    query = query.strip()
    if query:
        matching = ChatSession.objects.filter(
            Q(title__icontains=query) | Q(messages__content__icontains=query)
        ).values("pk")
        sessions = sessions.filter(pk__in=matching)
    else:
        sessions = sessions.filter(archived=archived)
    return sessions.order_by("-pinned", "-updated_at")


def _owned(request: HttpRequest, session_id: str) -> ChatSession:
    session = ChatSession.objects.filter(pk=session_id).first()
    if session is None or not may_use_session(request.user, session.owner_id):
        raise Http404("No such session.")
    return session


@login_required
@require_POST
def rename(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _owned(request, session_id)
    title = " ".join(request.POST.get("title", "").split())[:MAX_TITLE]
    ChatSession.objects.filter(pk=session.pk).update(title=title)
    return redirect("agents:session", session_id=session.pk)


@login_required
@require_POST
def delete(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _owned(request, session_id)
    if session.runs.filter(status__in=RunStatus.active()).exists():
        messages.error(request, f"“{session}” has a run in progress: stop it before deleting.")
        return redirect("agents:session", session_id=session.pk)
    name = str(session)
    session.delete()
    messages.success(request, f"Deleted “{name}”.")
    return redirect("agents:home")


def _back(request: HttpRequest) -> HttpResponse:
    """Back to the page the form was on (a local URL only), else the chat list."""
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect("agents:home")


def _flag(request: HttpRequest, session_id: str, field: str) -> ChatSession:
    """Set ``field`` of the chat from the form's ``value`` ("1" or "0")."""
    session = _owned(request, session_id)
    value = request.POST.get("value") == "1"
    ChatSession.objects.filter(pk=session.pk).update(**{field: value})
    return session


@login_required
@require_POST
def pin(request: HttpRequest, session_id: str) -> HttpResponse:
    _flag(request, session_id, "pinned")
    return _back(request)


@login_required
@require_POST
def archive(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _flag(request, session_id, "archived")
    if request.POST.get("value") == "1":
        messages.success(
            request, f"Archived “{session}”: find it under Archived chats or by search."
        )
    return _back(request)
