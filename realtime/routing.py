"""WebSocket routes, mounted by config.asgi behind origin validation and auth."""

from django.urls import URLPattern, URLResolver, path

from realtime.consumers import LiveStockConsumer

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/branches/<int:branch_id>/stock/", LiveStockConsumer.as_asgi()),
]
