"""WebSocket URL patterns: one socket per open chat, one per monitor page."""

from django.urls import URLPattern, path

from . import consumers

websocket_urlpatterns: list[URLPattern] = [
    path("ws/sessions/<str:session_id>/", consumers.SessionConsumer.as_asgi()),
    path("ws/monitor/", consumers.MonitorConsumer.as_asgi()),
]
