"""WebSocket URL patterns (placeholder until the consumers land)."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
