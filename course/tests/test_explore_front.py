"""The explorable answers' ASGI front: kept sets answered before Django, with the
view's bytes and the stack's headers; everything else left to Django."""

from __future__ import annotations

import pytest
from django.conf import settings

from course.explore_front import FRONT_HEADER
from course.labs.registry import lab_get
from course.policies import run_cost
from course.tests.test_explore import URL, counted_model, fresh_models
from library.tests.test_page_cache import asgi_get

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["fresh_models"]  # a fixture of the explorable tests, used here

FRONT = FRONT_HEADER.lower()
# Per answer: the model's own time, and the front's mark.
PER_ANSWER = {"server-timing", FRONT}


def test_a_kept_set_is_answered_by_the_front_as_the_view_answers(
    fresh_models, redis_client
):
    status, first, body = asgi_get(f"{URL}?requests=650")
    assert status == 200
    assert FRONT not in first  # nothing captured yet: Django answered
    lab = lab_get("cache-layers")
    with counted_model(lab) as runs:
        status, again, same = asgi_get(f"{URL}?requests=650")
    assert runs == []
    assert (status, again[FRONT], again["x-model-source"]) == (200, "1", "memory")
    assert same == body
    view = {k: v for k, v in first.items() if k not in PER_ANSWER}
    front = {k: v for k, v in again.items() if k not in PER_ANSWER}
    view["x-model-source"] = "memory"  # the first was run for
    assert front == view  # the security headers and Vary included


def test_a_held_answer_is_a_304_from_the_front(fresh_models, redis_client):
    _, first, _ = asgi_get(f"{URL}?requests=651")
    status, headers, body = asgi_get(f"{URL}?requests=651", etag=first["etag"])
    assert (status, body) == (304, b"")
    assert headers[FRONT] == "1"
    assert headers["etag"] == first["etag"]
    assert headers["x-frame-options"] == first["x-frame-options"]


def test_what_needs_django_is_left_to_it(fresh_models, redis_client):
    asgi_get(f"{URL}?requests=652")  # captured, and kept
    # A session: the visitor may be signed in.
    session = f"{settings.SESSION_COOKIE_NAME}=abc"
    assert FRONT not in asgi_get(f"{URL}?requests=652", cookie=session)[1]
    # A kept set asked with a previous set this process does not hold in memory:
    # the view reads it from the disk (off the event loop) to mark what moved.
    unknown = "0" * 24
    status, headers, _ = asgi_get(f"{URL}?requests=652&since={unknown}")
    assert (status, FRONT in headers) == (200, False)
    # A set nobody asked for: the view runs it.
    status, headers, _ = asgi_get(f"{URL}?requests=653")
    assert (status, headers["x-model-source"]) == (200, "run")
    assert FRONT not in headers
    # An invalid set, and one too costly without an account: the view says why.
    status, headers, _ = asgi_get(f"{URL}?requests=banana")
    assert (status, FRONT in headers) == (400, False)
    heavy = {"requests": "100000"}
    assert run_cost(lab_get("cache-layers"), lab_get("cache-layers").resolve(heavy)) > 5
    status, headers, _ = asgi_get(f"{URL}?requests=100000")
    assert (status, FRONT in headers) == (403, False)
    # A host that is not allowed: Django's 400.
    assert asgi_get(f"{URL}?requests=652", host="evil.example")[0] == 400
