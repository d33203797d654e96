"""The library pages: who may see what, search and paging, the loan desk flows."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client, RequestFactory
from django.urls import reverse

from library import views
from library.models import Book, Branch, Loan
from library.services import loan_issue

pytestmark = pytest.mark.django_db


def _login_redirect(response, url: str) -> bool:
    location: str = response.get("Location", "")
    return response.status_code == 302 and location.startswith(
        f"{reverse('account_login')}?next={url}"
    )


def _templates(response) -> list[str]:
    return [t.name for t in response.templates]


# --- Public pages ---------------------------------------------------------------------


def test_home_lists_branches_with_shelf_totals(client, branch, book):
    other = Branch.objects.create(name="Konak", city="Izmir")
    Book.objects.create(title="A", author="B", branch=other, on_shelf=5)
    Book.objects.create(title="C", author="D", branch=other, on_shelf=4)

    response = client.get(reverse("home"))

    assert response.status_code == 200
    rows = {b.name: (b.shelf_total, b.book_count) for b in response.context["branches"]}
    assert rows == {"Central": (2, 1), "Konak": (9, 2)}
    assert response.context["totals"]["shelf"] == 11
    assert reverse("branch-detail", args=[other.pk]) in response.content.decode()


def test_home_query_count_does_not_grow_with_branches(
    client, django_assert_max_num_queries
):
    for i in range(10):
        branch = Branch.objects.create(name=f"B{i}", city="X")
        Book.objects.create(title="T", author="A", branch=branch, on_shelf=1)

    with django_assert_max_num_queries(2):
        assert client.get(reverse("home")).status_code == 200


def test_branch_detail_shows_shelf_count_and_busiest_books(client, branch, member):
    quiet = Book.objects.create(title="Quiet", author="Q", branch=branch, on_shelf=4)
    busy = Book.objects.create(title="Busy", author="B", branch=branch, on_shelf=3)
    for _ in range(3):
        loan_issue(book_id=busy.pk, member_id=member.pk)

    response = client.get(reverse("branch-detail", args=[branch.pk]))

    assert response.status_code == 200
    detail = response.context["detail"]
    assert detail.branch.shelf_total == 4  # 4 + (3 - 3)
    assert detail.branch.open_loans == 3
    assert [b.pk for b in detail.busiest_books] == [busy.pk, quiet.pk]
    assert detail.busiest_books[0].loan_count == 3


def test_branch_detail_of_a_missing_branch_is_404(client):
    assert client.get(reverse("branch-detail", args=[999])).status_code == 404


def test_branch_books_searches_title_and_author_case_insensitively(client, branch):
    Book.objects.create(title="Dune", author="Frank Herbert", branch=branch)
    Book.objects.create(title="Emma", author="Jane Austen", branch=branch)
    other = Branch.objects.create(name="Other", city="Y")
    Book.objects.create(title="Dune Messiah", author="Frank Herbert", branch=other)
    url = reverse("branch-books", args=[branch.pk])

    by_title = client.get(url, {"q": "dUNE"})
    by_author = client.get(url, {"q": "austen"})

    assert [b.title for b in by_title.context["page"]] == ["Dune"]
    assert [b.title for b in by_author.context["page"]] == ["Emma"]
    assert "Dune Messiah" not in by_title.content.decode()


def test_branch_books_pages_by_20_and_page_links_keep_the_query(client, branch):
    Book.objects.bulk_create(
        Book(title=f"Atlas {n:02}", author="Cartographer", branch=branch)
        for n in range(45)
    )
    Book.objects.create(title="Unrelated", author="Nobody", branch=branch)
    url = reverse("branch-books", args=[branch.pk])

    first = client.get(url, {"q": "atlas"})
    last = client.get(url, {"q": "atlas", "page": 3})

    assert first.context["page"].paginator.count == 45
    assert len(first.context["page"]) == 20
    assert [b.title for b in last.context["page"]] == [
        f"Atlas {n}" for n in range(40, 45)
    ]
    assert "?q=atlas&amp;page=2" in first.content.decode()


def test_branch_books_with_a_bad_page_number_shows_a_page(client, branch, book):
    url = reverse("branch-books", args=[branch.pk])
    assert client.get(url, {"page": "nope"}).status_code == 200
    assert client.get(url, {"page": "999"}).context["page"].number == 1


def test_book_detail_shows_stock_and_hides_loans_from_the_public(client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    response = client.get(reverse("book-detail", args=[book.pk]))

    assert response.status_code == 200
    body = response.content.decode()
    assert book.title in body
    assert "Central" in body
    assert "v2" in body  # the version after the issue
    assert response.context["detail"].open_loans == []
    assert reverse("loan-return", args=[loan.pk]) not in body


def test_book_detail_lists_open_loans_with_return_buttons_for_staff(
    staff_client, book, member
):
    open_loan = loan_issue(book_id=book.pk, member_id=member.pk)
    closed = loan_issue(book_id=book.pk, member_id=member.pk)
    Loan.objects.filter(pk=closed.pk).update(return_date=datetime.date.today())

    response = staff_client.get(reverse("book-detail", args=[book.pk]))

    assert [loan.pk for loan in response.context["detail"].open_loans] == [open_loan.pk]
    body = response.content.decode()
    assert f'action="{reverse("loan-return", args=[open_loan.pk])}"' in body
    assert reverse("loan-return", args=[closed.pk]) not in body


def test_missing_book_answers_the_friendly_404_page(client):
    response = client.get(reverse("book-detail", args=[999_999]))

    assert response.status_code == 404
    assert "404.html" in _templates(response)
    assert "We could not find that page" in response.content.decode()


def test_server_error_page_renders_without_a_request_context():
    response = views.server_error(RequestFactory().get("/"))

    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()


def test_login_page_uses_the_site_template(client):
    response = client.get(reverse("account_login"))
    assert response.status_code == 200
    templates = _templates(response)
    assert "account/login.html" in templates
    assert "base.html" in templates  # allauth's page in the site's layout


# --- Member history -------------------------------------------------------------------


def test_member_history_asks_anonymous_users_to_sign_in(client, member):
    url = reverse("member-detail", args=[member.pk])
    assert _login_redirect(client.get(url), url)


def test_member_sees_their_own_history_privately(member_client, member, book):
    loan_issue(book_id=book.pk, member_id=member.pk)

    response = member_client.get(reverse("member-detail", args=[member.pk]))

    assert response.status_code == 200
    assert "private" in response["Cache-Control"]
    assert response.context["history"].total == 1
    assert book.title in response.content.decode()


def test_member_history_is_hidden_from_other_members(member_client, other_member, book):
    loan_issue(book_id=book.pk, member_id=other_member.pk)

    response = member_client.get(reverse("member-detail", args=[other_member.pk]))

    assert response.status_code == 403
    assert "403.html" in _templates(response)
    assert book.title not in response.content.decode()


def test_member_history_of_a_missing_member_is_403_for_readers_404_for_staff(
    member_client, staff_user
):
    url = reverse("member-detail", args=[999_999])
    assert member_client.get(url).status_code == 403
    member_client.force_login(staff_user)
    assert member_client.get(url).status_code == 404


def test_staff_see_any_member_history_paginated(staff_client, member, book):
    Loan.objects.bulk_create(
        Loan(book=book, member=member, pickup_date=datetime.date(2025, 1, day))
        for day in range(1, 26)
    )
    url = reverse("member-detail", args=[member.pk])

    first = staff_client.get(url)
    second = staff_client.get(url, {"page": 2})

    assert first.status_code == 200
    assert len(first.context["history"].loans) == 20
    assert [loan.pickup_date.day for loan in second.context["history"].loans] == [
        5,
        4,
        3,
        2,
        1,
    ]
    assert first.context["history"].open == 25


# --- Loan desk ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["loan-issue", "loan-return"])
def test_loan_desk_sends_anonymous_users_to_sign_in(client, name):
    url = reverse(name) if name == "loan-issue" else reverse(name, args=[1])
    assert _login_redirect(client.get(url), url)


@pytest.mark.parametrize("name", ["loan-issue", "loan-return"])
def test_loan_desk_is_403_for_members(member_client, name, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse(name) if name == "loan-issue" else reverse(name, args=[loan.pk])

    assert member_client.get(url).status_code == 403
    response = member_client.post(url, {"book_id": book.pk, "member_id": member.pk})
    assert response.status_code == 403
    assert Loan.objects.count() == 1


def test_issue_form_is_never_cached_and_prefills_the_book(staff_client, book):
    response = staff_client.get(reverse("loan-issue"), {"book": book.pk})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert response.context["form"]["book_id"].value() == book.pk
    assert book.title in response.content.decode()


def test_issue_via_the_form_redirects_with_a_message(staff_client, book, member):
    response = staff_client.post(
        reverse("loan-issue"), {"book_id": book.pk, "member_id": member.pk}
    )

    assert response.status_code == 303
    assert response["Location"] == reverse("book-detail", args=[book.pk])
    loan = Loan.objects.get()
    assert (loan.book_id, loan.member_id, loan.return_date) == (
        book.pk,
        member.pk,
        None,
    )
    book.refresh_from_db()
    assert book.on_shelf == 1
    page = staff_client.get(response["Location"])
    assert f"Loan #{loan.pk} issued" in page.content.decode()


def test_issue_without_a_copy_shows_the_conflict_on_the_form(
    staff_client, book, member
):
    Book.objects.filter(pk=book.pk).update(on_shelf=0)

    response = staff_client.post(
        reverse("loan-issue"), {"book_id": book.pk, "member_id": member.pk}
    )

    assert response.status_code == 409
    assert "no-store" in response["Cache-Control"]
    assert f"No copy of book #{book.pk} is on the shelf." in response.content.decode()
    assert not Loan.objects.exists()


def test_issue_to_an_unknown_member_answers_404_on_the_form(staff_client, book):
    response = staff_client.post(
        reverse("loan-issue"), {"book_id": book.pk, "member_id": 999_999}
    )

    assert response.status_code == 404
    assert "loan_issue.html" in " ".join(_templates(response))
    assert "Member #999999 does not exist." in response.content.decode()


def test_issue_with_an_invalid_form_is_400(staff_client):
    response = staff_client.post(reverse("loan-issue"), {"book_id": "x"})

    assert response.status_code == 400
    # Errors land beside the visible search fields, not the hidden ids.
    assert set(response.context["form"].errors) == {"book", "member"}


def test_return_confirmation_page_is_never_cached(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    response = staff_client.get(reverse("loan-return", args=[loan.pk]))

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert book.title in response.content.decode()


def test_return_of_a_missing_loan_is_404(staff_client):
    assert staff_client.get(reverse("loan-return", args=[999_999])).status_code == 404


def test_return_via_the_form_then_again_is_409(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse("loan-return", args=[loan.pk])

    first = staff_client.post(url)
    again = staff_client.post(url)

    assert first.status_code == 303
    assert first["Location"] == reverse("book-detail", args=[book.pk])
    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.return_date is not None
    assert book.on_shelf == 2
    assert again.status_code == 409
    assert f"Loan #{loan.pk} was already returned." in again.content.decode()
    book.refresh_from_db()
    assert book.on_shelf == 2


def test_return_before_pickup_is_400_on_the_form(staff_client, book, member):
    loan = loan_issue(
        book_id=book.pk, member_id=member.pk, pickup_date=datetime.date(2025, 5, 10)
    )

    response = staff_client.post(
        reverse("loan-return", args=[loan.pk]), {"return_date": "2025-05-01"}
    )

    assert response.status_code == 400
    assert "would precede the pickup" in response.content.decode()
    loan.refresh_from_db()
    assert loan.is_open


# --- CSRF -----------------------------------------------------------------------------


@pytest.fixture
def csrf_client(staff_user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_user)
    return client


def test_issue_post_without_csrf_token_is_refused(csrf_client, book, member):
    data = {"book_id": book.pk, "member_id": member.pk}

    refused = csrf_client.post(reverse("loan-issue"), data)

    assert refused.status_code == 403
    assert not Loan.objects.exists()
    # With the token from the form the same post goes through.
    csrf_client.get(reverse("loan-issue"))
    token = csrf_client.cookies["csrftoken"].value
    accepted = csrf_client.post(
        reverse("loan-issue"), {**data, "csrfmiddlewaretoken": token}
    )
    assert accepted.status_code == 303
    assert Loan.objects.count() == 1


def test_return_post_without_csrf_token_is_refused(csrf_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    response = csrf_client.post(reverse("loan-return", args=[loan.pk]))

    assert response.status_code == 403
    loan.refresh_from_db()
    assert loan.is_open


def test_counts_of_one_are_singular(client, redis_client):
    """ "1 branches", "1 lessons": every count in a sentence goes through pluralize."""
    Branch.objects.create(name="Only", city="Ankara")
    page = client.get("/").content.decode()
    assert "One branch · one catalogue" in page
    assert "One branches" not in page
