"""The agents app's pages: my sessions, a chat, the live monitor and a run's trace."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ..models import AgentProfile, ChatSession, OperatorAction, RunStatus
from ..profiles.demo import DEMO_SLUG
from . import chats, queries, rendering, timeline, wording
from .access import may_use_session
from .forms import NewChatForm
from .items import usage_total
from .totals import active_totals


def _visible_session(request: HttpRequest, session_id: str) -> ChatSession:
    """The session if this user may see it; a 404 otherwise, so its existence does not leak."""
    session = ChatSession.objects.select_related("profile", "owner").filter(pk=session_id).first()
    if session is None or not may_use_session(request.user, session.owner_id):
        raise Http404("No such session.")
    return session


def _home(request: HttpRequest, form: NewChatForm, status: int = 200) -> HttpResponse:
    query = request.GET.get("q", "")
    archived = request.GET.get("archived") == "1"
    sessions = chats.listed(request.user, query, archived=archived)
    profiles = form.fields["profile"].queryset  # type: ignore[attr-defined]
    context = {
        "form": form,
        "sessions": sessions,
        "profiles": profiles,
        "query": query,
        "archived": archived,
    }
    return render(request, "agents/home.html", context, status=status)


def _default_profile(request: HttpRequest) -> Any:
    """The agent a new chat starts with: the one this user chatted with last, else the demo."""
    active = AgentProfile.objects.filter(is_active=True)
    last = (
        ChatSession.objects.filter(owner=request.user, profile__is_active=True)
        .order_by("-updated_at")
        .values_list("profile_id", flat=True)
        .first()
    )
    if last is not None:
        return last
    return active.filter(slug=DEMO_SLUG).values_list("pk", flat=True).first()


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return _home(request, NewChatForm(initial={"profile": _default_profile(request)}))


@login_required
@require_POST
def new_session(request: HttpRequest) -> HttpResponse:
    form = NewChatForm(request.POST)
    if not form.is_valid():
        return _home(request, form, status=400)
    now = timezone.now()
    session = ChatSession.objects.create(
        owner=request.user,
        profile=form.cleaned_data["profile"],
        title=form.cleaned_data["title"],
        created_at=now,
        updated_at=now,
    )
    return redirect("agents:session", session_id=session.pk)


@login_required
@require_GET
def session_chat(request: HttpRequest, session_id: str) -> HttpResponse:
    session = _visible_session(request, session_id)
    runs = list(queries.runs_with_names().filter(session=session))
    active = next((run for run in runs if run.is_active), None)
    row = queries.row(active) if active else None
    view = rendering.run_view(row)
    latest = max(runs, key=lambda run: run.created_at, default=None)
    awaiting = frozenset(rendering.approval_calls(row))
    context = {
        "session": session,
        "items": rendering.transcript_items(queries.transcript(session), awaiting),
        # No active run: the bar shows how the last one ended, with its usage.
        "run_status": rendering.run_status(row or (queries.row(latest) if latest else None)),
        "waiting_run": view,
        "runs": runs,
        "usage_total": usage_total(runs) if runs else "",
        "can_compact": session.profile.extensions.filter(
            key="summary_compaction", enabled=True
        ).exists(),
    }
    return render(request, "agents/chat.html", context)


@login_required
@require_GET
def monitor(request: HttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        raise PermissionDenied("The monitor is for staff.")
    active, recent = queries.monitor_runs()
    return render(
        request,
        "agents/monitor.html",
        {
            "active": [rendering.monitor_row(row) for row in active],
            "totals": active_totals(active),
            "recent": [rendering.monitor_row(row) for row in recent],
            "statuses": [(value, wording.status(value)) for value in RunStatus.values],
        },
    )


@login_required
@require_GET
def run_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    run = (
        queries.runs_with_names().select_related("started_by").filter(request_id=request_id).first()
    )
    if run is None or not may_use_session(request.user, run.session.owner_id):
        raise Http404("No such run.")
    context = {
        "run": rendering.run_view(queries.row(run)),
        "session": run.session,
        "turns": timeline.build(list(run.events.order_by("seq"))),
        "actions": OperatorAction.objects.filter(run=run).select_related("user"),
    }
    return render(request, "agents/run_detail.html", context)
