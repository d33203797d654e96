"""The ASGI front of the explorable answers: kept sets answered on the event loop.

A class moving sliders asks one daphne for some thirty answers a second, most of
them parameter sets already kept (a slider dragged back, a value another learner
tried). The view's own work for such an answer is about a millisecond; Django's
middleware stack around it (sessions, CSRF, auth, messages, each stepping into the
request's thread for sync code and back) cost several times that, and under a
class the process's one interpreter was the queue every answer waited in. This
front answers an anonymous request for a set this process keeps in memory (or one
the client holds already: a 304) before Django is entered, with the bytes and
headers the view would send (``explore_response``) plus the headers the stack
added to the last answer Django sent for this site (captured on the way out, as
``course.lesson_front`` does for the lesson page).

Anything else goes to Django unchanged: a session or a flash message, a host that
is not allowed, plain HTTP the security middleware would redirect, a parameter set
that is invalid or costlier than an anonymous visitor may explore, a set not kept
in this process's memory (the view reads the disk or runs the model), and every
request for a site until Django has answered one.
"""

from __future__ import annotations

import re
import time
from typing import Any, Final

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    JsonResponse,
)
from django.utils.http import parse_etags

from course.explore import (
    ANSWER_MAX_AGE_S,
    Served,
    explore_body,
    explore_etag,
    explore_free,
    explore_lab,
    explore_params,
    explore_served_from_memory,
    explore_since,
)
from course.front import front_pass, front_send, front_visitor
from course.labs.harness.base import Lab, Params
from course.textbook import model_tables_in_memory

_MODEL_PATH: Final = re.compile(r"/course/(?P<slug>[-a-zA-Z0-9_]+)/model\.json")
# Said on an answer the front sent, for whoever wants to tell (tests, a curious
# operator); the rest of the answer is the view's.
FRONT_HEADER: Final = "X-Explore-Front"
# Per answer, or per visitor: never replayed from the captured headers.
_NOT_REPLAYED: Final = frozenset(
    {
        "content-length",
        "content-encoding",
        "content-type",
        "set-cookie",
        "etag",
        "cache-control",
        "x-model-source",
        "server-timing",
    }
)
# One entry per site (scheme and host) Django answered for: ALLOWED_HOSTS bounds
# them, and this bounds a wildcard ALLOWED_HOSTS.
_SITES_MAX: Final = 64
_captured: dict[str, list[tuple[str, str]]] = {}


# --- the answer, as the view sends it ---------------------------------------------


def explore_response(
    lab: Lab[Any], params: Params, served: Served, *, since: str, etag: str
) -> HttpResponse:
    """Return the JSON answer for a served parameter set (view and front alike)."""
    body = explore_body(lab, params, served, since=since)
    response = JsonResponse(body)
    response["X-Model-Source"] = served.source
    response["Server-Timing"] = f"model;dur={served.duration_ms:.1f}"
    return explore_cacheable(response, etag)


def explore_unchanged(etag: str) -> HttpResponse:
    """Return the 304 for a client that holds the answer tagged ``etag``."""
    return explore_cacheable(HttpResponseNotModified(), etag)


def explore_cacheable(response: HttpResponse, etag: str) -> HttpResponse:
    # The same query always gets the same tables (for this version of the labs):
    # the browser may keep them, and asks again with If-None-Match after.
    response["ETag"] = etag
    response["Cache-Control"] = f"public, max-age={ANSWER_MAX_AGE_S}"
    return response


def explore_etag_held(if_none_match: str, etag: str) -> bool:
    held = parse_etags(if_none_match)
    return etag in held or "*" in held


# --- the front ---------------------------------------------------------------------


class ExploreFront:
    """Answer anonymous requests for kept sets before Django; capture its headers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        candidate = _candidate(scope)
        if candidate is None:
            await self.app(scope, receive, send)
            return
        request, lab, site = candidate
        headers = _captured.get(site)
        answer = None if headers is None else _answer(request, lab)
        if answer is not None:
            await _send(send, answer, headers or [])
            return
        await front_pass(
            self.app, scope, receive, send, lambda start: _capture(site, start)
        )


def _candidate(scope: Any) -> tuple[HttpRequest, Lab[Any], str] | None:
    if scope["type"] != "http":
        return None
    match = _MODEL_PATH.fullmatch(scope["path"])
    if match is None:
        return None
    lab = explore_lab(match["slug"])
    if lab is None:
        return None
    visitor = front_visitor(scope)
    if visitor is None:
        return None
    request, site = visitor
    return request, lab, site


def _answer(request: HttpRequest, lab: Lab[Any]) -> HttpResponse | None:
    """Return the view's answer if it needs nothing but this process's memory."""
    began = time.perf_counter()
    params, _ = explore_params(lab, request.GET)
    if params is None or not explore_free(lab, params):
        return None  # the view says what is wrong, or asks who the visitor is
    since = explore_since(request.GET.get("since", ""))
    etag = explore_etag(lab, params, since)
    if explore_etag_held(request.headers.get("If-None-Match", ""), etag):
        return explore_unchanged(etag)
    served = explore_served_from_memory(lab, params, began=began)
    if served is None or (since and model_tables_in_memory(lab, since) is None):
        return None  # the view reads the disk for them, off the event loop
    return explore_response(lab, params, served, since=since, etag=etag)


def _capture(site: str, message: Any) -> None:
    """Keep the headers the stack added to an anonymous answer of the view."""
    if message["status"] != 200:
        return
    headers = [
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]
    ]
    names = {name.lower() for name, _ in headers}
    if "x-model-source" not in names or "set-cookie" in names:
        return  # not the view's answer, or one made for this visitor
    if site not in _captured and len(_captured) >= _SITES_MAX:
        return
    _captured[site] = [(n, v) for n, v in headers if n.lower() not in _NOT_REPLAYED]


def captured_clear() -> None:
    """Forget the captured headers (tests; a settings change)."""
    _captured.clear()


async def _send(
    send: Any, response: HttpResponse, extra: list[tuple[str, str]]
) -> None:
    for name, value in extra:
        if not response.has_header(name):
            response[name] = value
    response[FRONT_HEADER] = "1"
    await front_send(send, response)
