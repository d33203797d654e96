"""The book's version record: a page-tier hit without the database, never stale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.signals import request_started
from django.test import Client
from django.urls import reverse

from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.reads import specs
from library.cache.store.versions import version_advance
from library.models import Book, Member
from library.services import loan_issue, stock_correct
from library.tests.test_page_cache import asgi_get
from messaging.services import messaging_drain

pytestmark = pytest.mark.django_db

Capture = Callable[..., Any]


def record_of(book: Book) -> reads.BookVersion | None:
    return reads.book_version_parse(cache_redis().get(specs.book_record(book.pk)))


def test_a_cached_book_page_is_served_without_a_database_query(
    client: Client, book: Book, django_assert_num_queries: Capture
) -> None:
    url = reverse("book-detail", args=[book.pk])
    assert client.get(url)["X-Page-Cache"] == "miss"
    with django_assert_num_queries(0):
        assert client.get(url)["X-Page-Cache"] == "hit"


def test_the_next_request_after_a_committed_loan_shows_the_new_shelf(
    client: Client,
    book: Book,
    member: Member,
    django_capture_on_commit_callbacks: Capture,
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    assert client.get(url)["X-Page-Cache"] == "hit"
    with django_capture_on_commit_callbacks(execute=True):
        loan_issue(book_id=book.pk, member_id=member.pk)
    # No event delivered yet: the loan's own commit hook moved the record.
    after = client.get(url)
    assert after["X-Page-Cache"] == "miss"
    assert after.context["detail"].book.on_shelf == 1
    assert client.get(url)["X-Page-Cache"] == "hit"


def test_a_late_reader_cannot_move_the_record_back(book: Book) -> None:
    book.refresh_from_db()
    old = reads.book_version_of(book)
    stock_correct(book_id=book.pk, on_shelf=5)  # commits version 2 (hook not run)
    book.refresh_from_db()
    new = reads.book_version_of(book)
    key = specs.book_record(book.pk)
    # The loan's hook wrote 2; a reader that read 1 before it writes back late.
    assert version_advance(
        key, new.version, f"{new.branch_id}:{new.updated_us}", lifetime_s=60
    )
    assert not version_advance(
        key, old.version, f"{old.branch_id}:{old.updated_us}", lifetime_s=60
    )
    assert record_of(book) == new


def test_a_lost_record_is_read_from_the_database_again(
    client: Client, book: Book
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    stock_correct(book_id=book.pk, on_shelf=9)  # its hook never runs here
    cache_redis().delete(specs.book_record(book.pk))  # evicted, or Redis restarted
    after = client.get(url)
    assert after.context["detail"].book.on_shelf == 9
    book.refresh_from_db()
    assert record_of(book) == reads.book_version_of(book)


def test_a_rendering_of_a_newer_version_is_not_stored_under_the_old_key(
    client: Client, book: Book, cache_tenants_of_this_test: str
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)  # writes the record: version 1
    cache_redis().delete(
        *cache_redis().scan_iter(match=f"page:*{cache_tenants_of_this_test}*")
    )
    # A change commits between the record read and the view's own read.
    stock_correct(book_id=book.pk, on_shelf=4)
    first = client.get(url)
    assert first.context["detail"].book.on_shelf == 4  # the view reads the row
    assert first["X-Page-Cache"] == "miss"
    # Keyed as version 1, it was not kept: version 1's key must not show version 2.
    assert client.get(url)["X-Page-Cache"] == "miss"


def test_the_event_retires_a_record_its_commit_hook_missed(
    client: Client, book: Book, member: Member
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    loan_issue(book_id=book.pk, member_id=member.pk)  # the hook does not run here
    assert client.get(url)["X-Page-Cache"] == "hit"  # the record is behind
    messaging_drain(owner="test")  # cache_invalidation retires it
    after = client.get(url)
    assert after["X-Page-Cache"] == "miss"
    assert after.context["detail"].book.on_shelf == 1


@pytest.mark.django_db(transaction=True)
def test_the_asgi_front_answers_a_book_page_and_follows_a_committed_loan(
    book: Book, member: Member
) -> None:
    path = f"/books/{book.pk}/"
    status, headers, _ = asgi_get(path)
    assert (status, headers["x-page-cache"]) == (200, "miss")
    entered: list[object] = []

    def count(**kwargs: object) -> None:
        entered.append(kwargs)

    request_started.connect(count)
    try:
        status, headers, body = asgi_get(path)
        assert (status, headers["x-page-cache"]) == (200, "hit")
        assert entered == []  # answered on the event loop: Django never entered
        loan_issue(book_id=book.pk, member_id=member.pk)  # commits; its hook runs
        status, headers, after = asgi_get(path)
    finally:
        request_started.disconnect(count)
    assert (status, headers["x-page-cache"]) == (200, "miss")
    assert b'<strong class="big-number">2</strong>' in body
    assert b'<strong class="big-number">1</strong>' in after


def test_a_change_without_a_version_retires_the_record_and_is_done(
    client: Client, book: Book
) -> None:
    """A stock correction whose body has no version (the ordering lab's unusable
    head has none) cannot say which record is older: the record goes, and the
    invalidation succeeds instead of retrying for ever."""
    from messaging.models import Delivery
    from messaging.registry import MessageType
    from messaging.services import outbox_publish

    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    assert record_of(book) is not None
    outbox_publish(
        type=MessageType.STOCK_CORRECTED,
        key=book.pk,
        body={"book_id": book.pk, "branch_id": book.branch_id, "on_shelf": 0},
    )
    messaging_drain(owner="test")
    invalidation = Delivery.objects.get(subscription="cache_invalidation")
    assert invalidation.status == Delivery.Status.DONE
    assert record_of(book) is None
