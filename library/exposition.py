"""``/metrics``: the Prometheus exposition of the whole system, for operators only.

Two ways in, checked in this order:

1. ``Authorization: Bearer <token>`` equal to ``settings.METRICS_TOKEN``
   (``LIBRARY_METRICS_TOKEN``; empty turns tokens off), compared in constant time:
   what a Prometheus server sends. A bearer that does not match is a 401 with
   ``WWW-Authenticate``, so a scraper's log names the real problem;
2. a signed-in user holding ``VIEW_OPERATIONS`` (staff alone is not enough).

Anyone else gets a 403. The body is ``jobs.exposition.exposition_render``: every
app's families, read at scrape time. When Redis does not answer the scrape is a 503
with ``Retry-After`` (a partial page would read as zeros to an alert rule).
"""

from __future__ import annotations

import logging
from secrets import compare_digest
from typing import Final

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from jobs.exposition import exposition_render
from library.permissions import VIEW_OPERATIONS, user_may

__all__ = ["METRICS_RETRY_AFTER_S", "prometheus_metrics"]

logger = logging.getLogger(__name__)

METRICS_RETRY_AFTER_S: Final = 15  # a typical scrape interval


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _plain(status: int, text: str) -> HttpResponse:
    return HttpResponse(f"{text}\n", status=status, content_type="text/plain")


@never_cache
@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Answer the exposition to a valid token or a user with the permission."""
    token = _bearer(request)
    if token is not None:
        expected: str = settings.METRICS_TOKEN
        if not (expected and compare_digest(token.encode(), expected.encode())):
            response = _plain(401, "invalid token")
            response["WWW-Authenticate"] = (
                'Bearer realm="metrics", error="invalid_token"'
            )
            return response
    elif not user_may(request.user, VIEW_OPERATIONS):
        return _plain(403, "metrics need a token or the view_operations permission")
    try:
        body, content_type = exposition_render(request.headers.get("Accept", ""))
    except redis.RedisError as error:
        logger.warning("metrics: Redis unreachable: %s", error)
        response = _plain(503, "Redis is unavailable; the metrics cannot be read")
        response["Retry-After"] = str(METRICS_RETRY_AFTER_S)
        return response
    return HttpResponse(body, content_type=content_type)
