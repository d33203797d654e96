"""The http-caching lab: its model against the course and an independent reference, its
live part on real processes, its command line and lesson page.
"""

from __future__ import annotations

import datetime
import os
from datetime import UTC

import pytest
from django.contrib.auth.models import User

from config.processes import children
from course.labs import http_caching
from course.tests.labs import reference_http_caching as ref
from course.tests.labs.lab_results import (
    columns,
    live_tables,
    make_branches,
    rows,
    run,
)
from library.models import Book, Member

HTTP = "http-caching"


def test_http_caching_defaults_reproduce_the_course():
    result = run(HTTP)
    assert result["params"] == {}
    assert columns(result, "validators") == ["request", "status", "downloaded_bytes"]
    assert [row[1:] for row in rows(result, "validators")] == [
        [200, 79],
        [304, 0],
        [304, 0],
        [200, 79],
    ]
    shared_minute = "public, max-age=60"
    shared_seconds = "public, max-age=5, stale-while-revalidate=30"
    own_only = "private, max-age=30"
    nowhere = "no-store"
    assert rows(result, "directives") == [
        ["/book/7", shared_minute],
        ["/branch/1/stock", shared_seconds],
        ["/member/4/history", own_only],
        ["/loan/approval", nowhere],
    ]
    assert rows(result, "headers") == [
        [
            "before update",
            '"0853c3f417fbfc00"',
            "Tue, 01 Jul 2025 09:00:00 GMT",
            "Accept-Language",
        ],
        [
            "after update",
            '"5633883a8bff3669"',
            "Wed, 02 Jul 2025 14:30:00 GMT",
            "Accept-Language",
        ],
    ]


def test_http_caching_matches_reference():
    result = run(HTTP)
    assert [row[1:] for row in rows(result, "validators")] == ref.http_validators()


TAG = '"0853c3f417fbfc00"'


MODIFIED = datetime.datetime(2025, 7, 1, 9, 0, tzinfo=UTC)


def test_etag_is_the_quoted_sha256_prefix_of_the_body():
    names = ["bookId", "title", "author", "on_shelf"]
    values = [7, "Sand: Borges Selection", "Anthology", 3]
    body = http_caching.json_text(dict(zip(names, values, strict=True)))
    assert len(body.encode()) == 79
    assert http_caching.etag_for(body) == TAG
    assert http_caching.etag_for(body.encode()) == TAG


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, False),
        ({"If-None-Match": TAG}, True),
        ({"if-none-match": TAG}, True),
        ({"If-None-Match": f'"other", {TAG}'}, True),
        ({"If-None-Match": f'"a,b" ,W/{TAG}'}, True),  # weak comparison
        ({"If-None-Match": '"other"'}, False),
        ({"If-None-Match": "*"}, True),
        ({"If-None-Match": "0853c3f417fbfc00"}, False),  # unquoted is no tag
        # If-None-Match present: the date is not consulted, even when it would match
        (
            {
                "If-None-Match": '"other"',
                "If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT",
            },
            False,
        ),
        ({"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}, True),
        ({"If-Modified-Since": "Wed, 02 Jul 2025 00:00:00 GMT"}, True),
        ({"If-Modified-Since": "Tue, 01 Jul 2025 08:59:59 GMT"}, False),
        ({"If-Modified-Since": "Tuesday, 01-Jul-25 09:00:00 GMT"}, True),  # RFC 850
        ({"If-Modified-Since": "not a date"}, False),
    ],
)
def test_is_not_modified_follows_the_conditional_rules(headers, expected):
    assert http_caching.is_not_modified(headers, TAG, MODIFIED) is expected


def test_if_modified_since_needs_a_last_modified_date():
    headers = {"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}
    assert http_caching.is_not_modified(headers, TAG, None) is False


def test_last_modified_compares_whole_seconds():
    later_in_second = datetime.datetime(2025, 7, 1, 9, 0, 0, 700_000, tzinfo=UTC)
    headers = {"If-Modified-Since": "Tue, 01 Jul 2025 09:00:00 GMT"}
    assert http_caching.is_not_modified(headers, None, later_in_second) is True


def test_not_modified_answer_repeats_validators_without_a_body():
    api = http_caching.LibraryApi()
    first = api.handle("GET", "/book/7")
    again = api.handle("GET", "/book/7", {"If-None-Match": first.headers["etag"]})
    assert (again.status, again.body) == (304, b"")
    assert again.headers["etag"] == first.headers["etag"]
    assert again.headers["cache-control"] == "public, max-age=60"
    assert api.handle("GET", "/nowhere").status == 404


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_http_caching_live_validators_and_directives(redis_client):
    branches = make_branches()
    book = Book.objects.create(
        pk=7, title="Sand: Borges Selection", author="Anthology",
        branch=branches[0], on_shelf=3,
    )  # fmt: skip
    Member.objects.create(
        first_name="Ada", last_name="Lovelace", registered_at=datetime.date(2024, 1, 1)
    )
    users_before = User.objects.count()

    tables = live_tables("http-caching")

    validators = rows(tables, "live_validators")
    assert tables["live_validators"]["columns"] == [
        "request",
        "status",
        "downloaded_bytes",
    ]
    assert [row[0] for row in validators] == [
        row[0] for row in rows(tables, "validators")
    ]
    assert [row[1] for row in validators] == [200, 304, 304, 200]
    assert validators[0][2] > 0
    assert validators[1][2] == validators[2][2] == 0
    assert validators[3][2] > 0
    [before, after] = rows(tables, "live_headers")
    assert before[1] != after[1]  # the write changed the validator
    assert dict(rows(tables, "live_directives")) == {
        "/books/7/": "public, max-age=60",
        "/branches/1/": "public, max-age=5, stale-while-revalidate=30",
        f"/members/{Member.objects.get().pk}/": "private, max-age=30",
        "/loans/issue/": "max-age=0, no-cache, no-store, must-revalidate, private",
    }
    book.refresh_from_db()
    assert book.on_shelf == 3  # the shelf count is put back
    assert User.objects.count() == users_before  # the throwaway account is gone
    assert children(os.getpid()) == []
