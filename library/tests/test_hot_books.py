"""Hot books: an operator's mark makes a book's page stale-while-revalidate, so a
reader at its expiry is answered at once while one refresh runs in the background."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from library.cache import hot
from library.cache.metrics import cache_redis
from library.cache.reads import book_detail
from library.cache.reads import books as book_reads
from library.cache.store import decode, encode, local_tier, refreshes_wait
from library.models import Book

pytestmark = pytest.mark.django_db
BOOKS = "/admin/library/book/"


@pytest.fixture(autouse=True)
def no_marks_left() -> Iterator[None]:
    cache_redis().delete(hot.HOT_KEY)
    hot.hot_marks_reload()
    yield
    cache_redis().delete(hot.HOT_KEY)
    hot.hot_marks_reload()


@pytest.fixture
def origin_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every origin call of a book page (the reader's, or another)."""
    calls: list[int] = []
    real = book_reads.book_origin

    def counted(book_id: int) -> object:
        calls.append(threading.get_ident())
        return real(book_id)

    monkeypatch.setattr(book_reads, "book_origin", counted)
    return calls


def page_keys(scope: str) -> list[str]:
    found = cache_redis().scan_iter(match=f"book:*{scope}*")
    return sorted(k.decode() for k in found)


def expire_fresh_time(key: str) -> None:
    """What time does to a stale-while-revalidate entry: its fresh time passes."""
    entry = decode(cast(bytes, cache_redis().get(key)))
    entry["f"] = int(time.time() * 1000) - 1
    cache_redis().set(key, encode(entry), keepttl=True)


def test_an_ordinary_book_makes_its_reader_wait_for_the_origin_at_expiry(
    book: Book, origin_threads: list[int], cache_tenants_of_this_test: str
) -> None:
    book_detail(book_id=book.pk)
    (key,) = page_keys(cache_tenants_of_this_test)
    cache_redis().delete(key)  # its lifetime ran out
    local_tier.clear()
    origin_threads.clear()
    book_detail(book_id=book.pk)
    assert origin_threads == [threading.get_ident()]  # the reader went itself


# The refresh runs on a thread of its own, with a connection of its own: it must
# see the book, so the test's rows are committed.
@pytest.mark.django_db(transaction=True)
def test_a_hot_book_is_served_stale_and_refreshed_behind_the_reader(
    book: Book, origin_threads: list[int], cache_tenants_of_this_test: str
) -> None:
    assert hot.hot_books_mark([book.pk]) == 1
    assert hot.book_is_hot(book.pk)
    assert book_detail(book_id=book.pk) is not None
    (key,) = page_keys(cache_tenants_of_this_test)
    assert "hot=1" in key  # a key of its own: the stored form is an envelope
    expire_fresh_time(key)
    origin_threads.clear()
    cached = book_detail(book_id=book.pk)
    assert cached is not None
    assert cached.book.on_shelf == book.on_shelf
    assert threading.get_ident() not in origin_threads  # the reader did not wait
    assert refreshes_wait(10)
    assert len(origin_threads) == 1  # one refresh, in the background
    assert decode(cast(bytes, cache_redis().get(key)))["f"] > time.time() * 1000
    assert hot.hot_books_unmark([book.pk]) == 1
    assert not hot.book_is_hot(book.pk)


def test_marks_reach_a_process_within_its_snapshot_time(book: Book) -> None:
    moments = iter([100.0, 100.5, 100.5 + hot.SNAPSHOT_S])
    assert not hot.book_is_hot(book.pk, clock=lambda: next(moments))
    cache_redis().hset(hot.HOT_KEY, str(book.pk), "1")  # another server marked it
    assert not hot.book_is_hot(book.pk, clock=lambda: next(moments))
    assert hot.book_is_hot(book.pk, clock=lambda: next(moments))


def test_marking_is_an_admin_action_behind_the_change_right(book: Book) -> None:
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_book"))
    client = Client()
    client.force_login(user)
    data = {"action": "mark_hot", "_selected_action": [book.pk]}
    client.post(BOOKS, data)
    assert hot.hot_books() == {}
    user.user_permissions.add(Permission.objects.get(codename="change_book"))
    client.force_login(User.objects.get(pk=user.pk))
    assert client.post(BOOKS, data).status_code == 302
    assert list(hot.hot_books()) == [book.pk]
    client.post(BOOKS, {**data, "action": "unmark_hot"})
    assert hot.hot_books() == {}
