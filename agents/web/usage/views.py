"""The Usage page and its CSV download, for staff only."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from . import export, figures, period, report


def _staff_only(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("Usage is for staff.")


def _period(request: HttpRequest) -> tuple[period.Period | None, str]:
    try:
        return period.parse(request.GET), ""
    except period.PeriodError as error:
        return None, str(error)


@login_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    _staff_only(request)
    chosen, error = _period(request)
    context: dict[str, Any] = {
        "presets": list(period.PRESETS.items()),
        "error": error,
        "start": request.GET.get("start", ""),
        "end": request.GET.get("end", ""),
    }
    if chosen is None:
        return render(request, "agents/usage.html", context, status=400)
    usage = report.build(chosen)
    context.update(
        {
            "period": chosen,
            "report": usage,
            "charts": figures.charts(usage),
            "start": chosen.start.isoformat(),
            "end": chosen.end.isoformat(),
        }
    )
    return render(request, "agents/usage.html", context)


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    _staff_only(request)
    chosen, error = _period(request)
    if chosen is None:
        return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")
    usage = report.build(chosen)
    response = HttpResponse(export.to_csv(usage), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{export.filename(usage)}"'
    return response
