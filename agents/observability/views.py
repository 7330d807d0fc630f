"""GET /metrics: this process's metrics in the Prometheus text format, for staff or a token.

A scraper sends ``Authorization: Bearer <ZETT_METRICS_TOKEN>``; a person signed in as
staff may look in a browser. Everybody else gets 401 (no credentials) or 403.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import EXPOSED


def _bearer_ok(request: HttpRequest) -> bool | None:
    """True/False for a bearer token that matches or not; None when none was sent."""
    header = request.headers.get("Authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None
    expected = getattr(settings, "ZETT_METRICS_TOKEN", "")
    return bool(expected) and hmac.compare_digest(credential.strip(), expected)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    bearer = _bearer_ok(request)
    if bearer is False:
        return _refused(401)
    if bearer is None:
        user = request.user
        if not user.is_authenticated:
            return _refused(401)
        if not user.is_staff:
            return _refused(403)
    return HttpResponse(generate_latest(EXPOSED), content_type=CONTENT_TYPE_LATEST)


def _refused(status: int) -> HttpResponse:
    response = HttpResponse(
        "Metrics are for staff, or a scraper with the bearer token.\n",
        status=status,
        content_type="text/plain; charset=utf-8",
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
