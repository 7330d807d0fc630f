"""Login throttling: django-axes' lockout check, and the page a locked-out login gets."""

from __future__ import annotations

import math
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class LoginThrottleBackend(AxesStandaloneBackend):
    """Refuses every login of a locked-out account or address; logs in nobody itself.

    A login without a request (a script or test calling authenticate()) is not a guess over
    the web, and axes would raise for it, so it passes to the next backend unchecked.
    """

    def authenticate(  # type: ignore[override]
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username, password, **kwargs)
        return None


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """429 with the wait in words and in Retry-After; every attempt meanwhile restarts it."""
    wait = settings.AXES_COOLOFF_TIME.total_seconds()
    response = render(
        request,
        "registration/locked_out.html",
        {"wait_minutes": max(1, math.ceil(wait / 60))},
        status=429,
    )
    response["Retry-After"] = str(math.ceil(wait))
    return response


__all__ = ["LoginThrottleBackend", "lockout_response"]
