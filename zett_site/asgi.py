"""The ASGI entry point: HTTP through Django, WebSockets through Channels' URL router."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zett_site.settings")

# Sets Django up; must run before anything that imports models (the routing, consumers).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ChannelNameRouter, ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import re_path  # noqa: E402

from agents.hosting import WORKER_CHANNEL  # noqa: E402
from agents.hosting.startup import (  # noqa: E402
    StartRunManager,
    recover_stale_runs,
    start_manager_with_server,
)
from agents.hosting.worker import RunWorkerConsumer  # noqa: E402
from agents.web.routing import websocket_urlpatterns  # noqa: E402

# Runs of a process that died are marked interrupted before this one serves anything,
# and this process's reaper starts with the server, not with its first connection.
recover_stale_runs()
start_manager_with_server()


async def refuse_unknown_socket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An upgrade to a path no consumer serves is refused (HTTP 403), like an unknown page.

    Without this the router raises "No route found", which Daphne logs as an ERROR with a
    traceback and answers with a 500.
    """
    if (await receive())["type"] == "websocket.connect":
        await send({"type": "websocket.close"})  # before accept: Daphne denies the handshake


application = StartRunManager(
    ProtocolTypeRouter(
        {
            # Static files come from WhiteNoise in the middleware (ZETT_SERVE_STATIC).
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(
                    URLRouter([*websocket_urlpatterns, re_path(r"", refuse_unknown_socket)])
                )
            ),
            # `manage.py runworker zett-runs` (ZETT_RUN_WORKERS=1) hosts runs here.
            "channel": ChannelNameRouter({WORKER_CHANNEL: RunWorkerConsumer.as_asgi()}),
        }
    )
)
