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


# --- the ASGI front -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_front_answers_the_shared_page_before_django_with_a_valid_token() -> None:
    from django.conf import settings
    from django.core.signals import request_started

    from library.tests.test_page_cache import asgi_get

    status, first, _ = asgi_get(lesson_url())
    assert (status, first["x-lesson-cache"]) == (200, "view")
    entered: list[object] = []

    def count(**kwargs: object) -> None:
        entered.append(kwargs)

    request_started.connect(count)
    try:
        status, again, body = asgi_get(lesson_url())
    finally:
        request_started.disconnect(count)
    assert (status, again["x-lesson-cache"]) == (200, "front")
    assert entered == []  # Django never entered
    for header in ("x-frame-options", "x-content-type-options", "content-type"):
        assert again[header] == first[header]
    assert int(again["content-length"]) == len(body)
    assert PLACEHOLDER.encode() not in body
    cookie = again["set-cookie"]
    assert cookie.startswith(f"{settings.CSRF_COOKIE_NAME}=")
    secret = cookie.split(";")[0].split("=", 1)[1]
    token = TOKEN.findall(body)[-1].decode()
    # The front's cookie and token pass Django's own CSRF check.
    client = Client(enforce_csrf_checks=True)
    client.cookies[settings.CSRF_COOKIE_NAME] = secret
    answer = client.post(
        reverse("course-progress", args=[SLUG]),
        {"event": "read", "csrfmiddlewaretoken": token},
        secure=True,
        headers={"referer": "https://testserver" + lesson_url()},
    )
    assert answer.status_code != 403
    # A returning visitor keeps their cookie: a token of their secret, no new cookie.
    status, returning, _ = asgi_get(
        lesson_url(), cookie=f"{settings.CSRF_COOKIE_NAME}={secret}"
    )
    assert (status, returning["x-lesson-cache"]) == (200, "front")
    assert "set-cookie" not in returning
    # A session is never answered from the shared page.
    _, with_session, _ = asgi_get(
        lesson_url(), cookie=f"{settings.SESSION_COOKIE_NAME}=x"
    )
    assert with_session.get("x-lesson-cache") is None


def test_the_page_gzipped_in_pieces_is_the_page_with_its_token() -> None:
    from course.lesson_cache import gzip_with_token

    text = "lesson text " * 500
    html = f"<p>{text}</p><input value='{PLACEHOLDER}'>é<b>{PLACEHOLDER}</b>"
    for token in ("a" * 64, "b" * 64):
        packed = gzip_with_token(html, token)
        assert gzip.decompress(packed) == html.replace(PLACEHOLDER, token).encode()
        assert len(packed) < len(html) / 5
