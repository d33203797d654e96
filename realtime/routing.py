"""WebSocket routes, mounted by config.asgi behind origin validation and auth."""

from django.urls import URLPattern, URLResolver

websocket_urlpatterns: list[URLPattern | URLResolver] = []
