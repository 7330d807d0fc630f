"""Permissions-Policy on every response (Django's own settings send the other headers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest


class PermissionsPolicyMiddleware:
    """Adds settings.PERMISSIONS_POLICY. Async under ASGI, so it costs no hop to a thread."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.policy: str = settings.PERMISSIONS_POLICY
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._with_policy_async(request)
        return self._add(self.get_response(request))

    async def _with_policy_async(self, request: HttpRequest) -> Any:
        return self._add(await self.get_response(request))

    def _add(self, response: Any) -> Any:
        response.headers.setdefault("Permissions-Policy", self.policy)
        return response


__all__ = ["PermissionsPolicyMiddleware"]
