"""A desk form sent twice lends or returns once, and answers with the first result.

With daphnes killed during loan POSTs, half of the failed requests had issued their
loan: the clerk's retry would lend the book twice. Each rendering of the issue and
return forms carries a random key; the loan stores it (a unique column), so the
same submission again, in sequence or racing the first, changes nothing more.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse

from config.processes import wait_until
from library.models import Book, Loan, Member
from library.services import loan_issue
from messaging.models import OutboxMessage
from messaging.registry import MessageType

pytestmark = pytest.mark.django_db

KEY_FIELD = re.compile(r'name="idempotency_key" value="([A-Za-z0-9_-]+)"')


def rendered_key(client: Client, url: str) -> str:
    """Open the form as a clerk would and return the key it was rendered with."""
    page = client.get(url)
    assert page.status_code == 200
    found = KEY_FIELD.search(page.content.decode())
    assert found is not None, "the form carries no idempotency key"
    return found.group(1)


def messages_of(kind: str) -> int:
    return OutboxMessage.objects.filter(type=kind).count()


def test_each_rendering_of_the_forms_has_a_new_random_key(staff_client, book, member):
    issue = reverse("loan-issue")
    keys = {rendered_key(staff_client, issue) for _ in range(3)}
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    keys.add(rendered_key(staff_client, reverse("loan-return", args=[loan.pk])))
    assert len(keys) == 4
    assert all(len(key) >= 32 for key in keys)


def test_the_same_issue_form_sent_twice_lends_once(staff_client, book, member):
    url = reverse("loan-issue")
    form = {
        "book_id": book.pk,
        "member_id": member.pk,
        "idempotency_key": rendered_key(staff_client, url),
    }

    first = staff_client.post(url, form)
    again = staff_client.post(url, form)  # the clerk's retry: the answer was lost

    assert (first.status_code, again.status_code) == (303, 303)
    assert again["Location"] == first["Location"]
    loan = Loan.objects.get()
    book.refresh_from_db()
    assert book.on_shelf == 1
    assert messages_of(MessageType.LOAN_ISSUED) == 1
    page = staff_client.get(again["Location"]).content.decode()
    assert "This form had already been sent; nothing was changed." in page
    assert f"Loan #{loan.pk} issued" in page


def test_a_key_is_not_a_licence_for_another_loan(
    staff_client, book, member, other_member
):
    url = reverse("loan-issue")
    key = rendered_key(staff_client, url)
    staff_client.post(
        url, {"book_id": book.pk, "member_id": member.pk, "idempotency_key": key}
    )
    loan = Loan.objects.get()

    other = staff_client.post(
        url, {"book_id": book.pk, "member_id": other_member.pk, "idempotency_key": key}
    )

    assert other.status_code == 409
    assert f"already used to issue loan #{loan.pk}" in other.content.decode()
    assert Loan.objects.count() == 1


def test_a_refused_issue_leaves_its_key_unused(staff_client, book, member):
    Book.objects.filter(pk=book.pk).update(on_shelf=0)
    url = reverse("loan-issue")
    form = {
        "book_id": book.pk,
        "member_id": member.pk,
        "idempotency_key": rendered_key(staff_client, url),
    }

    refused = staff_client.post(url, form)
    assert refused.status_code == 409
    # Shown again with the same key: the refusal changed nothing.
    assert f'value="{form["idempotency_key"]}"' in refused.content.decode()
    Book.objects.filter(pk=book.pk).update(on_shelf=1)
    assert staff_client.post(url, form).status_code == 303
    assert Loan.objects.get().issue_key == form["idempotency_key"]


def test_a_damaged_key_is_refused_on_the_form(staff_client, book, member):
    answer = staff_client.post(
        reverse("loan-issue"),
        {"book_id": book.pk, "member_id": member.pk, "idempotency_key": "x<y"},
    )
    assert answer.status_code == 400
    assert "This form is damaged; open it again." in answer.content.decode()
    assert not Loan.objects.exists()


def test_the_same_return_form_sent_twice_returns_once(staff_client, book, member):
    loan = loan_issue(book_id=book.pk, member_id=member.pk)
    url = reverse("loan-return", args=[loan.pk])
    form = {"return_date": "", "idempotency_key": rendered_key(staff_client, url)}

    first = staff_client.post(url, form)
    again = staff_client.post(url, form)

    # Not the 409 "already returned" a second, different return gets.
    assert (first.status_code, again.status_code) == (303, 303)
    loan.refresh_from_db()
    book.refresh_from_db()
    assert loan.return_key == form["idempotency_key"]
    assert book.on_shelf == 2
    assert messages_of(MessageType.RETURN_RECEIVED) == 1
    page = staff_client.get(again["Location"]).content.decode()
    assert "This form had already been sent; nothing was changed." in page
    assert f"Loan #{loan.pk} returned" in page
    # A new rendering of the page is a new return, refused as before.
    fresh = {"return_date": "", "idempotency_key": rendered_key(staff_client, url)}
    assert staff_client.post(url, fresh).status_code == 409


# --- Two copies of one submission at once (PostgreSQL) ----------------------------


def _in_thread(work: Callable[[], object], results: list[object]) -> threading.Thread:
    def run() -> None:
        try:
            results.append(work())
        except Exception as error:  # reported by the test's assertion
            results.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="row locks and concurrent transactions: PostgreSQL",
)
def test_a_double_submit_racing_itself_lends_once(
    staff_user, book: Book, member: Member
) -> None:
    """Both copies pass the "already issued?" look before either commits.

    The book's row is held locked while the two requests arrive, so each has found
    no loan with its key and waits to take a copy; two copies are on the shelf, so
    both could. Released, one commits; the other's loan collides on the key.
    """
    session = Client()
    session.force_login(staff_user)
    url = reverse("loan-issue")
    form = {
        "book_id": book.pk,
        "member_id": member.pk,
        "idempotency_key": rendered_key(session, url),
    }
    cookies = session.cookies
    results: list[object] = []
    locked, release = threading.Event(), threading.Event()

    def hold_the_book() -> None:
        with transaction.atomic():
            Book.objects.select_for_update().get(pk=book.pk)
            locked.set()
            release.wait(60)

    holder = _in_thread(hold_the_book, [])
    wait_until(locked.is_set, "the book's row locked")

    def submit() -> object:
        clerk = Client()
        clerk.cookies = cookies
        answer = clerk.post(url, form)
        return (answer.status_code, answer.get("Location"))

    clerks = [_in_thread(submit, results) for _ in range(2)]
    wait_until(lambda: _waiting_on_locks() == 2, "both submissions at the book's row")
    release.set()
    for thread in (holder, *clerks):
        thread.join(60)

    location = reverse("book-detail", args=[book.pk])
    assert results == [(303, location), (303, location)]
    assert Loan.objects.count() == 1
    book.refresh_from_db()
    assert book.on_shelf == 1
    assert messages_of(MessageType.LOAN_ISSUED) == 1
