"""The cached reads behind the library's pages: tenants, privacy, invalidation through
the cache_invalidation subscription, and what a repeated read costs the origin.

Each test has its own tenants (``cache_tenants_of_this_test`` in conftest), so the
Redis keys a test finds are the ones its own requests wrote.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from library.cache import reads
from library.cache.metrics import cache_redis
from library.cache.store import generation_get
from library.models import Book, Branch, Member
from library.services import loan_issue, loan_return
from messaging.models import Delivery
from messaging.services import messaging_drain

pytestmark = pytest.mark.django_db


def keys_of(scope: str) -> list[str]:
    return sorted(k.decode() for k in cache_redis().scan_iter(match=f"*{scope}*"))


def library_queries(context: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in context.captured_queries if '"library_' in q["sql"]]


def test_same_search_in_two_branches_gets_two_keys_and_two_bodies(
    client: Client, cache_tenants_of_this_test: str
) -> None:
    two = Branch.objects.create(name="Two", city="A")
    three = Branch.objects.create(name="Three", city="B")
    Book.objects.create(title="Sand of Two", author="X", branch=two, on_shelf=1)
    Book.objects.create(title="Sand of Three", author="Y", branch=three, on_shelf=1)

    first = client.get(reverse("branch-books", args=[two.pk]), {"q": "sand"})
    second = client.get(reverse("branch-books", args=[three.pk]), {"q": "sand"})

    assert b"Sand of Two" in first.content
    assert b"Sand of Two" not in second.content
    assert b"Sand of Three" in second.content
    assert first["ETag"] != second["ETag"]
    scope = cache_tenants_of_this_test
    search_keys = [k for k in keys_of(scope) if k.startswith("search:")]
    assert len(search_keys) == 2
    assert any(f"t{scope}-branch-{two.pk}:" in k for k in search_keys)
    assert any(f"t{scope}-branch-{three.pk}:" in k for k in search_keys)


def test_a_member_history_is_private_and_keyed_by_that_member_only(
    member_client: Client,
    member: Member,
    other_member: Member,
    book: Book,
    cache_tenants_of_this_test: str,
) -> None:
    loan_issue(book_id=book.pk, member_id=member.pk)

    own = member_client.get(reverse("member-detail", args=[member.pk]))
    other = member_client.get(reverse("member-detail", args=[other_member.pk]))

    assert own.status_code == 200
    assert own["Cache-Control"] == "private, max-age=30"
    assert "public" not in own["Cache-Control"]
    assert other.status_code == 403
    scope = cache_tenants_of_this_test
    history = [k for k in keys_of(scope) if k.startswith("history:")]
    own_tenant = f":t{scope}-member-{member.pk}:"
    assert any(own_tenant in k for k in history)
    # The refused read may load the other member's entry, but every entry sits
    # under exactly one member's tenant with that same member in its criteria.
    for key in history:
        pk = member.pk if own_tenant in key else other_member.pk
        assert f":t{scope}-member-{pk}:" in key
        assert key.endswith(f"member={pk}&page=1")


def test_no_session_or_csrf_value_reaches_a_key(
    member_client: Client, member: Member, book: Book
) -> None:
    loan_issue(book_id=book.pk, member_id=member.pk)
    pages = [
        reverse("member-detail", args=[member.pk]),
        reverse("book-detail", args=[book.pk]),
        reverse("branch-detail", args=[book.branch_id]),
        reverse("branch-books", args=[book.branch_id]) + "?q=rose",
    ]
    for page in pages:
        assert member_client.get(page).status_code == 200

    secrets = [member_client.cookies[name].value for name in ("sessionid", "csrftoken")]
    assert all(len(s) >= 16 for s in secrets)
    # Every key of the database, not only this test's: no one may leak them.
    for raw in cache_redis().scan_iter(count=1000):
        key = raw.decode(errors="replace")
        assert not any(secret in key for secret in secrets), key


def test_a_loan_bumps_the_branch_generations_through_the_subscription(
    client: Client, book: Book, member: Member
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    tenant = reads.branch_tenant(book.branch_id)
    before = client.get(url)
    assert before.context["page"].object_list[0].on_shelf == 2
    generation = generation_get("list", tenant)

    loan_issue(book_id=book.pk, member_id=member.pk)
    # Until the message is delivered, the cached page is what readers get.
    assert client.get(url)["ETag"] == before["ETag"]

    messaging_drain(owner="test")

    assert Delivery.objects.get(subscription="cache_invalidation").status == "done"
    assert generation_get("list", tenant) == generation + 1
    assert generation_get("search", tenant) > 1
    after = client.get(url)
    assert after.context["page"].object_list[0].on_shelf == 1
    assert after["ETag"] != before["ETag"]


def test_the_subscription_retires_the_stock_page(
    client: Client, book: Book, member: Member
) -> None:
    url = reverse("branch-detail", args=[book.branch_id])
    assert client.get(url).context["detail"].branch.shelf_total == 2
    loan_issue(book_id=book.pk, member_id=member.pk)
    messaging_drain(owner="test")

    # Retired by the handler: the next read rebuilds it, fresh, once.
    assert client.get(url).context["detail"].branch.shelf_total == 1
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.context["detail"].branch.shelf_total == 1
    assert library_queries(queries) == []


def test_a_return_retires_the_member_history_pages(
    member_client: Client, member: Member, book: Book
) -> None:
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    messaging_drain(owner="test")
    url = reverse("member-detail", args=[member.pk])
    assert member_client.get(url).context["history"].open == 1

    loan_return(loan_id=loan.pk)
    messaging_drain(owner="test")

    assert member_client.get(url).context["history"].open == 0


def test_a_second_catalogue_read_makes_no_query(
    client: Client, book: Book, django_assert_num_queries
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    with CaptureQueriesContext(connection) as first:
        client.get(url, {"q": "rose", "page": "1"})
    assert library_queries(first)
    # The same question, spelled differently ("01"), is the same entry.
    with django_assert_num_queries(0):
        response = client.get(url, {"q": "rose", "page": "01"})
    assert response.status_code == 200
    assert b"The Name of the Rose" in response.content


def test_a_second_book_read_makes_only_the_version_lookup(
    client: Client, book: Book, django_assert_num_queries, cache_tenants_of_this_test
) -> None:
    url = reverse("book-detail", args=[book.pk])
    client.get(url)
    # The page tier would answer from its entry with no query at all
    # (test_book_versions): drop it, so the view runs on the data tier.
    pages = f"page:*{cache_tenants_of_this_test}*"
    cache_redis().delete(*cache_redis().scan_iter(match=pages))
    with django_assert_num_queries(1) as queries:
        response = client.get(url)
    assert response.status_code == 200
    assert "version" in queries.captured_queries[0]["sql"]


def test_a_second_history_read_makes_no_library_query(
    member_client: Client, member: Member, book: Book
) -> None:
    loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse("member-detail", args=[member.pk])
    member_client.get(url)
    with CaptureQueriesContext(connection) as queries:
        response = member_client.get(url)
    assert response.status_code == 200
    # Only the session, the user and the nav's "My loans" link are read: no loan
    # and no book.
    loans_or_books = [
        sql for sql in library_queries(queries) if '"library_loan"' in sql
    ] + [sql for sql in library_queries(queries) if '"library_book"' in sql]
    assert loans_or_books == []


def test_a_changed_book_is_read_under_its_new_version(
    client: Client, book: Book, member: Member, django_capture_on_commit_callbacks
) -> None:
    url = reverse("book-detail", args=[book.pk])
    assert client.get(url).context["detail"].book.on_shelf == 2
    with django_capture_on_commit_callbacks(execute=True):
        loan_issue(book_id=book.pk, member_id=member.pk)
    # No delivery needed: the version in the key changed with the loan (the page
    # tier reads it from the record the loan's commit hook wrote).
    assert client.get(url).context["detail"].book.on_shelf == 1


def test_missing_rows_answer_404_and_are_not_cached(
    client: Client, cache_tenants_of_this_test: str
) -> None:
    assert client.get(reverse("branch-books", args=[999_999])).status_code == 404
    assert client.get(reverse("branch-detail", args=[999_999])).status_code == 404
    assert client.get(reverse("book-detail", args=[999_999])).status_code == 404
    assert keys_of(f"{cache_tenants_of_this_test}-branch-999999:") == []


def test_a_failed_bump_leaves_the_delivery_to_be_retried(
    client: Client, book: Book, member: Member, settings
) -> None:
    url = reverse("branch-books", args=[book.branch_id])
    tenant = reads.branch_tenant(book.branch_id)
    client.get(url)
    generation = generation_get("list", tenant)
    redis_url = settings.REDIS_URL
    loan_issue(book_id=book.pk, member_id=member.pk)

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    messaging_drain(owner="test")
    settings.REDIS_URL = redis_url

    delivery = Delivery.objects.get(subscription="cache_invalidation")
    # Rolled back with its guard row: not done, waiting for its retry (the drain
    # may already have retried once, the first backoff being short).
    assert delivery.status == "pending"
    assert delivery.attempts >= 1
    assert "ConnectionError" in delivery.last_error
    assert generation_get("list", tenant) == generation
    others = Delivery.objects.exclude(subscription="cache_invalidation")
    assert {d.status for d in others} == {"done"}

    Delivery.objects.filter(pk=delivery.pk).update(available_at=delivery.created_at)
    messaging_drain(owner="test")

    delivery.refresh_from_db()
    assert delivery.status == "done"
    assert generation_get("list", tenant) == generation + 1
    assert client.get(url).context["page"].object_list[0].on_shelf == 1
