"""The stream front keeps what Django's stack would have done before a stream.

``realtime.front`` serves the stream routes itself; these requests prove it still
refuses a foreign Host, redirects plain HTTP when HTTPS is required, sends the
security headers, and leaves other methods and routes to Django.
"""

from __future__ import annotations

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.test import override_settings

# Imported at module level: loading it sets Django up again (see test_stream_limits).
from config.asgi import application
from jobs.services import jobstatus_create
from realtime.front import StreamFront
from tests.asgi import http_scope

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_client"),
]


def _request(
    path: str, *, host: str = "127.0.0.1", method: str = "GET", app=application
):
    return ApplicationCommunicator(app, http_scope(path, method=method, host=host))


async def _answer(app: ApplicationCommunicator) -> tuple[int, dict[bytes, bytes]]:
    await app.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await app.receive_output(10)
    headers = {bytes(k).lower(): bytes(v) for k, v in start["headers"]}
    return int(start["status"]), headers


async def test_a_stream_carries_the_security_headers(library):
    app = _request("/realtime/branches/1/events")
    status, headers = await _answer(app)
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"x-frame-options"] == b"DENY"
    assert headers[b"cache-control"] == b"no-store"
    await app.send_input({"type": "http.disconnect"})
    await app.wait(timeout=5)


async def test_a_foreign_host_is_refused_by_django(library):
    status, _ = await _answer(_request("/realtime/branches/1/events", host="evil.test"))
    assert status == 400


async def test_plain_http_is_redirected_when_https_is_required(library):
    # Django's middleware reads the setting when the handler is built: build one.
    with override_settings(SECURE_SSL_REDIRECT=True):
        front = StreamFront(ASGIHandler())
        app = _request("/realtime/branches/1/events", app=front)
        status, headers = await _answer(app)
    assert status == 301
    assert headers[b"location"].startswith(b"https://127.0.0.1/realtime/")


async def test_other_methods_are_left_to_django(library):
    job = await _job()
    path = f"/realtime/jobs/{job}/wait"
    status, _ = await _answer(_request(path, method="OPTIONS"))
    assert status == 405  # the view's own answer, through Django
    status, _ = await _answer(_request(path, method="POST"))
    assert status == 403  # Django's CSRF check comes first


async def test_an_unknown_branch_is_a_clear_404(library):
    status, headers = await _answer(_request("/realtime/branches/99/events"))
    assert status == 404
    assert headers[b"content-type"] == b"application/json"


async def _job() -> str:
    from asgiref.sync import sync_to_async

    job = await sync_to_async(jobstatus_create)(kind="lab", name="front", params={})
    return str(job.pk)
