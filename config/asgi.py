"""ASGI entry point: HTTP through admission control to Django, WebSocket to Channels.

WebSocket connections pass the allowed-hosts origin check and session authentication
before any consumer sees them.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: routing pulls in consumers that touch models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from config.admission import http_stack  # noqa: E402
from jobs.telemetry import SeriesShedRecorder  # noqa: E402
from library.cache.pages import PageTierASGI  # noqa: E402
from realtime.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Admission control sheds overload first (config.admission) and records each
        # shed in the operations history; stored anonymous pages are then answered
        # without entering Django.
        "http": http_stack(
            PageTierASGI(django_asgi_app), shed_recorder=SeriesShedRecorder()
        ),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
