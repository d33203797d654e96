"""The admin opens for staff only and changes loans and stock through the services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from library.models import Book, Loan
from library.permissions import RETURN_LOAN, permission_get
from library.services import loan_issue

pytestmark = pytest.mark.django_db

MODELS = ["branch", "book", "member", "loan"]


@pytest.mark.parametrize("model", MODELS)
def test_changelist_opens_for_staff(staff_client, model, book, member):
    loan_issue(book_id=book.pk, member_id=member.pk)

    response = staff_client.get(reverse(f"admin:library_{model}_changelist"))

    assert response.status_code == 200
    assert response.context["cl"].result_count == 1


@pytest.mark.parametrize("model", MODELS)
def test_changelist_redirects_members_and_anonymous_users(client, member, model):
    url = reverse(f"admin:library_{model}_changelist")
    assert client.get(url).status_code == 302
    assert member.user is not None
    client.force_login(member.user)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_changelist_search_and_filters_work(staff_client, book, member):
    loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse("admin:library_loan_changelist")

    assert staff_client.get(url, {"q": "Rose"}).context["cl"].result_count == 1
    assert staff_client.get(url, {"q": "nothing"}).context["cl"].result_count == 0
    assert staff_client.get(url, {"return_date__isempty": "1"}).status_code == 200


def test_loans_cannot_be_added_or_deleted_in_the_admin(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    assert staff_client.get(reverse("admin:library_loan_add")).status_code == 403
    delete = reverse("admin:library_loan_delete", args=[loan.pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    assert Loan.objects.filter(pk=loan.pk).exists()


def test_loan_change_page_is_read_only(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse("admin:library_loan_change", args=[loan.pk])

    page = staff_client.get(url)
    staff_client.post(url, {"book": 999, "member": 999, "return_date": "2025-01-01"})

    assert page.status_code == 200
    assert 'name="return_date"' not in page.content.decode()
    loan.refresh_from_db()
    assert (loan.book_id, loan.member_id, loan.return_date) == (
        book.pk,
        member.pk,
        None,
    )


def test_return_action_goes_through_the_service(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)

    response = staff_client.post(
        reverse("admin:library_loan_changelist"),
        {"action": "return_loans", "_selected_action": [loan.pk]},
        follow=True,
    )

    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.return_date is not None
    assert (book.on_shelf, book.version) == (2, 3)
    assert "1 loan(s) returned." in response.content.decode()


def _book_form(book: Book, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "title": book.title,
        "author": book.author,
        "publication_year": book.publication_year or "",
        "branch": book.branch_id,
        "on_shelf": book.on_shelf,
        "on_shelf_seen": book.on_shelf,
    }
    return {**data, **changes}


def test_book_edit_keeps_loans_issued_while_the_form_was_open(
    staff_client, book, member
):
    url = reverse("admin:library_book_change", args=[book.pk])
    assert staff_client.get(url).status_code == 200
    form = _book_form(book, title="Il nome della rosa")  # what the page showed
    loan_issue(book_id=book.pk, member_id=member.pk)  # meanwhile at the desk

    response = staff_client.post(url, form)

    assert response.status_code == 302
    book.refresh_from_db()
    assert book.title == "Il nome della rosa"
    assert book.on_shelf == 1  # the loan's copy stays off the shelf
    assert book.version == 3  # the loan, then the edit


def test_book_shelf_count_edit_is_a_stock_correction(staff_client, book):
    url = reverse("admin:library_book_change", args=[book.pk])

    response = staff_client.post(url, _book_form(book, on_shelf=9))

    assert response.status_code == 302
    book.refresh_from_db()
    assert (book.on_shelf, book.version) == (9, 2)


def test_return_action_needs_the_desk_right_not_the_change_permission(
    client, book, member
):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    clerk = get_user_model().objects.create_user("clerk", is_staff=True)
    for name in ("library.view_loan", "library.change_loan"):
        clerk.user_permissions.add(permission_get(name))
    client.force_login(clerk)
    url = reverse("admin:library_loan_changelist")
    action = {"action": "return_loans", "_selected_action": [loan.pk]}

    client.post(url, action)
    loan.refresh_from_db()
    assert loan.return_date is None

    clerk.user_permissions.add(permission_get(RETURN_LOAN))
    client.post(url, action)
    loan.refresh_from_db()
    assert loan.return_date is not None
