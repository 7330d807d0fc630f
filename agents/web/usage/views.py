"""The Usage page and its CSV download, for staff only."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET

from ...hosting import format_cost
from . import chart, export, period, report


def _staff_only(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("Usage is for staff.")


def _tokens(count: int) -> str:
    return f"{count:,} tokens"


def charts(usage: report.Report) -> list[tuple[str, SafeString]]:
    """(caption, svg) of each chart: cost per day in each currency (tokens when nothing was
    priced), then tokens by user and by profile, since tokens compare across currencies and
    include unpriced runs. The svg's <title> repeats the caption for screen readers."""
    days = len(usage.days)
    figures: list[tuple[str, str, str, list[chart.Bar]]] = []
    for currency in usage.currencies:
        total = format_cost(usage.total.cost_in(currency), currency)
        figures.append(
            (
                f"cost-{currency.lower()}",
                f"Cost per day in {currency}",
                f"Total {total} over {days} days; runs without a price are not in this chart.",
                [
                    chart.Bar(
                        day.key, day.cost_in(currency), format_cost(day.cost_in(currency), currency)
                    )
                    for day in usage.days
                ],
            )
        )
    if not usage.priced:
        figures.append(
            (
                "tokens",
                "Tokens per day (no price set)",
                f"Total {_tokens(usage.total.tokens)} over {days} days.",
                [
                    chart.Bar(day.key, Decimal(day.tokens), _tokens(day.tokens))
                    for day in usage.days
                ],
            )
        )
    result = [
        (title, chart.columns(f"chart-{key}", title, desc, bars))
        for key, title, desc, bars in figures
    ]
    for key, title, groups in (
        ("users", "Tokens by user", usage.users),
        ("profiles", "Tokens by profile", usage.profiles),
    ):
        if groups:
            bars = [chart.Bar(g.key, Decimal(g.tokens), _tokens(g.tokens)) for g in groups]
            desc = f"{len(groups)} {key}, most tokens first."
            result.append((title, chart.bars(f"chart-{key}", title, desc, bars)))
    return result


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
            "charts": charts(usage),
            "start": chosen.start.isoformat(),
            "end": chosen.end.isoformat(),
            "query": request.GET.urlencode(),
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
