"""No page a signed-in user can reach may be stored by a shared cache.

A signed-in page names its user and carries a CSRF token; ``public`` (or a bare
``max-age``, which a shared cache may also store) would let a proxy hand it to the
next visitor. The walk resolves every URL pattern of the site (``tests.site_walk``)
over a small library of real rows and asks each as a superuser and as a reader.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase

from library.middleware import SIGNED_IN, private_directives
from tests.site_walk import SmallLibrary, routes, signed_in, small_library

# Transactional: on PostgreSQL a request whose query fails (a third-party admin
# page) would otherwise abort the test's transaction under every later request.
pytestmark = pytest.mark.django_db(transaction=True)

# Queries that take a route past its "missing parameter" answer to the page itself.
QUERIES = {
    "report-loans-csv": "month=2025-03",
    "realtime-job-wait": "timeout_ms=0",
    "course-lesson": "job={lab}",
    "course-compare": "run={lab}&run={lab}",
    "member-detail": "page=1",
}


@pytest.fixture
def library(redis_client) -> SmallLibrary:
    return small_library()


def _closed(response: HttpResponseBase) -> HttpResponseBase:
    if isinstance(response, StreamingHttpResponse):
        response.close()  # a stream is never read here: its headers are the answer
    return response


def _directives(header: str) -> Iterator[str]:
    return (part.strip().split("=")[0].lower() for part in header.split(","))


def leaks(library: SmallLibrary, user: User) -> tuple[list[str], int]:
    """Return the answers a shared cache could keep, and how many pages were 200."""
    # A 500 is a page too: it must be private as well (the fuzz test hunts them).
    client = signed_in(user, raise_errors=False)
    found, pages = [], 0
    for route in routes(library).routes:
        query = QUERIES.get(route.name, "").format(lab=library.lab.pk)
        response = _closed(client.get(f"{route.path}?{query}" if query else route.path))
        pages += response.status_code == 200
        directives = set(_directives(response.get("Cache-Control", "")))
        if "public" in directives or not directives & {"private", "no-store"}:
            found.append(
                f"{route.path} {response.status_code} "
                f"Cache-Control: {response.get('Cache-Control')!r}"
            )
    return found, pages


def test_every_route_is_walked(library):
    walk = routes(library)
    assert walk.unfilled == []
    assert len(walk.routes) > 150  # the site's views, the admin and its pages


def test_no_page_of_a_signed_in_superuser_is_shareable(library):
    found, pages = leaks(library, library.staff)
    assert found == []
    assert pages > 100  # most routes answered with their page, not a refusal


def test_no_page_of_a_signed_in_reader_is_shareable(library):
    found, pages = leaks(library, library.reader)
    assert found == []
    assert pages > 10


@pytest.mark.parametrize(
    ("view_said", "sent"),
    [
        (None, SIGNED_IN),
        ("public, max-age=300", "private, max-age=300"),
        ("max-age=60", "private, max-age=60"),
        ("PUBLIC, s-maxage=60", "private, s-maxage=60"),
        # Only the named fields are private there: the rest could be shared.
        ('private="Set-Cookie"', 'private, private="Set-Cookie"'),
        ("private, max-age=30", "private, max-age=30"),
        ("no-store", "no-store"),
    ],
)
def test_a_signed_in_answer_is_made_private(view_said, sent):
    assert private_directives(view_said) == sent
