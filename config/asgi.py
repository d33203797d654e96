"""ASGI entry point: HTTP through load shedding to Django, WebSocket to Channels.

WebSocket connections pass the same-origin check (``realtime.origin``: scheme, host
and port) and session authentication before any consumer sees them.
"""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: routing pulls in consumers that touch models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from course.explore_front import ExploreFront  # noqa: E402
from course.instruments.routes import LabRoutes  # noqa: E402
from course.lesson_front import LessonPageASGI  # noqa: E402
from jobs.shedding import AdmissionControl, ASGIApp  # noqa: E402
from jobs.telemetry import SeriesShedRecorder  # noqa: E402
from library.cache.pages import PageTierASGI  # noqa: E402
from realtime.front import StreamFront  # noqa: E402
from realtime.limits import descriptor_report  # noqa: E402
from realtime.origin import SameOriginValidator  # noqa: E402
from realtime.routing import websocket_urlpatterns  # noqa: E402

# Said once when a server loads the application: an open-files limit too low for
# REALTIME_MAX_STREAMS would fail clients with EMFILE long before the 503s start.
descriptor_report()

# The collector, tuned for a server that holds thousands of connections. Everything
# loaded so far (Django, the apps, the URL and template machinery) lives as long as
# the process: frozen, no collection walks it again. And a collection runs after
# 100,000 new container objects instead of 700: with 10,000 open streams one fan-out
# allocates a few hundred thousand, and the default thresholds had it pay two young
# and one full collection of the whole heap, over a second, before the first stream
# got its event. Measured on one daphne: 2,000 streams had an event 390 ms after its
# commit with the defaults, 150 ms tuned; 10,000 streams 2.3 s, under 1 s
# (bench/results/sse-postgres*.md). The price is some garbage in cycles kept a
# little longer; reference counting frees the rest at once.
gc.freeze()
gc.set_threshold(100_000, 50, 100)


def http_stack(app: ASGIApp) -> ASGIApp:
    """Wrap the HTTP app: lab routes when enabled, load shedding outermost.

    Load shedding (``jobs.shedding``) records each shed in the operations history;
    the lab routes (``course.instruments.routes``) answer without entering Django.
    """
    inner = app
    if settings.LAB_ROUTES:
        inner = LabRoutes(inner, work_capacity=settings.LAB_WORK_CAPACITY)
    return AdmissionControl.from_settings(inner, shed_recorder=SeriesShedRecorder())


application = ProtocolTypeRouter(
    {
        # Load shedding refuses overload first (jobs.shedding); stored anonymous
        # pages are then answered without entering Django, and event streams and
        # long polls are served on the event loop, a coroutine each, no thread.
        # The shared lesson page too (course.lesson_front), and the explorable
        # answers this process keeps (course.explore_front).
        "http": http_stack(
            StreamFront(LessonPageASGI(ExploreFront(PageTierASGI(django_asgi_app))))
        ),
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
