"""The shared anonymous lesson page: stored once, served with each visitor's token."""

from __future__ import annotations

import gzip
import re

import pytest
from django.test import Client
from django.urls import reverse

from course.lesson_cache import PLACEHOLDER, shared_key
from course.lessons import lesson_get

pytestmark = pytest.mark.django_db

SLUG = "cache-layers"
TOKEN = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')


def lesson_url() -> str:
    assert lesson_get(SLUG) is not None
    return reverse("course-lesson", args=[SLUG])


def test_two_visitors_share_the_page_but_not_the_token() -> None:
    first, second = Client(), Client()
    one = first.get(lesson_url(), secure=True)
    two = second.get(lesson_url(), secure=True)
    assert one.status_code == two.status_code == 200
    assert one.context is not None  # rendered
    assert two.context is None  # served from the stored page
    tokens_one, tokens_two = TOKEN.findall(one.content), TOKEN.findall(two.content)
    assert tokens_one
    assert tokens_two
    assert PLACEHOLDER.encode() not in one.content + two.content
    # Each token is valid for its own visitor's cookie: the CSRF middleware set one.
    for client in (first, second):
        assert client.cookies.get(_csrf_cookie()) is not None
    assert tokens_one[0] != tokens_two[0]
    assert TOKEN.sub(b"", one.content) == TOKEN.sub(b"", two.content)


def test_the_stored_pages_token_is_accepted_by_the_form(settings) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get(lesson_url(), secure=True)  # stores the page
    page = client.get(lesson_url(), secure=True)
    assert page.context is None
    token = TOKEN.findall(page.content)[-1].decode()
    # The "mark as read" form: a 403 would mean the token does not match the cookie.
    answer = client.post(
        reverse("course-progress", args=[SLUG]),
        {"event": "read", "csrfmiddlewaretoken": token},
        secure=True,
        headers={"referer": "https://testserver" + lesson_url()},
    )
    assert answer.status_code != 403


def test_a_session_a_query_or_a_signed_in_user_is_rendered_for_them(
    client: Client, rf
) -> None:
    request = rf.get(lesson_url(), secure=True)
    from django.contrib.auth.models import AnonymousUser

    request.user = AnonymousUser()
    assert shared_key(request, SLUG) is not None
    with_query = rf.get(lesson_url() + "?job=x", secure=True)
    with_query.user = AnonymousUser()
    assert shared_key(with_query, SLUG) is None
    with_session = rf.get(lesson_url(), secure=True)
    with_session.COOKIES[_session_cookie()] = "abc"
    with_session.user = AnonymousUser()
    assert shared_key(with_session, SLUG) is None


def test_the_anonymous_page_is_gzipped_when_the_client_accepts_it() -> None:
    client = Client()
    plain = client.get(lesson_url(), secure=True)
    packed = client.get(lesson_url(), secure=True, headers={"accept-encoding": "gzip"})
    assert "Content-Encoding" not in plain
    assert packed["Content-Encoding"] == "gzip"
    assert len(packed.content) < len(plain.content) / 3
    assert TOKEN.sub(b"", gzip.decompress(packed.content)) == TOKEN.sub(
        b"", plain.content
    )


def _csrf_cookie() -> str:
    from django.conf import settings

    return settings.CSRF_COOKIE_NAME


def _session_cookie() -> str:
    from django.conf import settings

    return settings.SESSION_COOKIE_NAME
